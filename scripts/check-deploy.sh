#!/usr/bin/env bash
# Offline checks of the deployment files, against the real tools where this
# machine has them:
#   - deploy/k8s and its overlays render with `kubectl kustomize`, and every
#     rendered object validates against its Kubernetes schema
#     (kubernetes-models, @kubernetes-models/prometheus-operator,
#     cert-manager and cloudnative-pg);
#   - docker/Dockerfile passes dockerfilelint;
#   - docker/prometheus.yml (with deploy/prometheus/rules.yaml) passes
#     `promtool check config`.
# npm packages come from deploy/check/package-lock.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check="$root/deploy/check"
command -v kubectl > /dev/null || {
  echo "check-deploy: kubectl is missing (it renders deploy/k8s with kustomize); install it: https://kubernetes.io/docs/tasks/tools/" >&2
  exit 1
}
if [ ! -d "$check/node_modules" ]; then
  (cd "$check" && npm ci --no-audit --no-fund --loglevel=error)
fi

for dir in deploy/k8s deploy/k8s/overlays/production \
  deploy/k8s/overlays/postgresql deploy/k8s/overlays/cloudnative-pg; do
  echo "== $dir"
  kubectl kustomize "$root/$dir" | node "$check/validate-k8s.mjs"
done

echo "== docker/Dockerfile"
(cd "$check" && npx --no-install dockerfilelint "$root/docker/Dockerfile")

echo "== docker/prometheus.yml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/deploy/prometheus/rules.yaml" "$work/rules.yaml"
sed "s|/etc/prometheus/rules.yaml|$work/rules.yaml|" \
  "$root/docker/prometheus.yml" > "$work/prometheus.yml"
promtool check config "$work/prometheus.yml"
