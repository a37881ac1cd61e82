# A runner image for Kubernetes job mode and the docker driver: terraform plus the exec-loop
# as entrypoint. Any image with /bin/sh and terraform/tofu works as a runner; this one is a default.
#   docker build -f deploy/docker/runner.Dockerfile \
#     --build-arg TERRAFORM_IMAGE=hashicorp/terraform:1.11.4 -t ghcr.io/drover-dev/drover-runner:1.11.4 .
# BASE_IMAGE is any Debian bookworm image; TERRAFORM_IMAGE any image holding /bin/terraform
# (HashiCorp's own images do). scripts/build-images.mjs passes both, built without a registry.
# The docker driver's default container user is 65532 (no host account has it); it gets an entry
# here because ssh (git::ssh:// module sources) refuses to run as a uid /etc/passwd does not name.
ARG BASE_IMAGE=debian:bookworm-slim
ARG TERRAFORM_IMAGE=hashicorp/terraform:1.11.4

FROM ${TERRAFORM_IMAGE} AS terraform

FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git openssh-client \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && groupadd --gid 1000 drover && useradd --uid 1000 --gid 1000 --home-dir /home/drover --create-home drover
RUN groupadd --gid 65532 drover-run \
 && useradd --uid 65532 --gid 65532 --no-log-init --home-dir /tmp --no-create-home --shell /usr/sbin/nologin drover-run
COPY --from=terraform /bin/terraform /usr/local/bin/terraform
COPY packages/agent/exec-loop/exec-loop.sh /usr/local/bin/drover-exec-loop
RUN chmod 0755 /usr/local/bin/drover-exec-loop
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/drover-exec-loop"]
