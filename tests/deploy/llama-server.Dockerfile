# A stand-in for the official ghcr.io/ggml-org/llama.cpp:server image, for
# tests/test_deploy.py on a machine that cannot pull it: the llama-server
# that deploy/setup.sh provisions (Debian sid's, with its own C library),
# laid out as the official image is (llama.cpp's .devops/cpu.Dockerfile,
# "server" stage): /app/llama-server as the entrypoint, /app the working
# directory, LLAMA_ARG_HOST=0.0.0.0 so that it listens on 8080 on every
# interface, and curl for the health check. The build context is the
# provisioned directory ($SLUICE_CACHE_DIR/llama.cpp); PREFIX is where its
# prefix/ lies there, the path its wrapper script (bin/llama-server) names.
FROM debian:bookworm-slim

RUN apt-get update \
	&& apt-get install -y --no-install-recommends curl \
	&& rm -rf /var/lib/apt/lists/*

ARG PREFIX
COPY prefix ${PREFIX}
COPY bin/llama-server /app/llama-server

ENV LLAMA_ARG_HOST=0.0.0.0
WORKDIR /app
HEALTHCHECK CMD [ "curl", "-f", "http://localhost:8080/health" ]
ENTRYPOINT [ "/app/llama-server" ]
