# A static floodgate on an empty base image: no shell, no package manager,
# a non-root user. The binary and the CA certificates come from the build
# context that `make image` prepares (build/image/), so the image builds
# without pulling anything. Time zone data is built into the binary.
FROM scratch

ARG VERSION=dev
LABEL org.opencontainers.image.title="floodgate" \
      org.opencontainers.image.description="API gateway and distributed rate-limit service" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY floodgate /floodgate
COPY floodgate.yaml /etc/floodgate/floodgate.yaml

USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/floodgate"]
CMD ["serve", "-c", "/etc/floodgate/floodgate.yaml"]
