# PostgreSQL 15 from Debian for docker/compose.postgresql.yaml, on the same
# debian:bookworm-slim base as sdgd's image (scripts/check-image.sh makes it
# without a registry). A local trial's database; in production run
# PostgreSQL as deploy/k8s/overlays/cloudnative-pg does, or a managed one.
#   docker build -f docker/postgres.Dockerfile -t sdgd-postgres .
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data \
    && chown postgres:postgres /var/lib/postgresql/data \
    && chmod 0700 /var/lib/postgresql/data
COPY docker/postgres-entrypoint.sh /usr/local/bin/
USER postgres
ENV PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint.sh"]
