# A runner image for Kubernetes job mode: terraform plus the exec-loop as entrypoint.
# Any image with /bin/sh and terraform/tofu works as a runner; this one is a default.
#   docker build -f deploy/docker/runner.Dockerfile --build-arg TERRAFORM_VERSION=1.11.4 \
#     -t ghcr.io/drover-dev/drover-runner:1.11.4 .
FROM debian:bookworm-slim
ARG TERRAFORM_VERSION=1.11.4
ARG TARGETARCH=amd64
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl unzip git openssh-client \
 && curl -fsSLo /tmp/terraform.zip "https://releases.hashicorp.com/terraform/${TERRAFORM_VERSION}/terraform_${TERRAFORM_VERSION}_linux_${TARGETARCH}.zip" \
 && unzip /tmp/terraform.zip -d /usr/local/bin \
 && rm /tmp/terraform.zip \
 && apt-get purge -y curl unzip && apt-get autoremove -y \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 1000 drover && useradd --uid 1000 --gid 1000 --home-dir /home/drover --create-home drover
COPY packages/agent/exec-loop/exec-loop.sh /usr/local/bin/drover-exec-loop
RUN chmod 0755 /usr/local/bin/drover-exec-loop
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/drover-exec-loop"]
