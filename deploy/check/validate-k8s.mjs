// Validates Kubernetes objects (multi-document YAML on stdin, e.g. the output
// of `kubectl kustomize deploy/k8s`) against their schemas, offline, with the
// kubernetes-models packages. Exits 1 naming each invalid object.
import { readFileSync } from "node:fs";
import { loadAll } from "js-yaml";

// apiVersion -> the module that has its kinds.
function modulePath(apiVersion) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  }
  if (apiVersion.startsWith("postgresql.cnpg.io/")) {
    return `@kubernetes-models/cloudnative-pg/${apiVersion}`;
  }
  if (apiVersion.startsWith("cert-manager.io/")) {
    return `@kubernetes-models/cert-manager/${apiVersion}`;
  }
  return `kubernetes-models/${apiVersion}`;
}

const documents = loadAll(readFileSync(0, "utf8")).filter(Boolean);
let failures = 0;
for (const object of documents) {
  const name = `${object.kind} ${object.metadata?.name ?? "(no name)"}`;
  try {
    const module = await import(modulePath(object.apiVersion));
    const Kind = module[object.kind];
    if (Kind === undefined) {
      throw new Error(`unknown kind in ${object.apiVersion}`);
    }
    new Kind(object).validate();
    console.log(`ok      ${object.apiVersion} ${name}`);
  } catch (error) {
    failures += 1;
    console.log(`INVALID ${object.apiVersion} ${name}: ${error.message}`);
  }
}
if (documents.length === 0) {
  console.log("no objects on stdin");
  process.exit(1);
}
process.exit(failures === 0 ? 0 : 1);
