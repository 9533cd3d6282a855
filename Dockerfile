# Builds the API and the worker. compose.yaml uses the two final stages.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/api ./cmd/api \
 && CGO_ENABLED=0 go build -trimpath -o /out/worker ./cmd/worker \
 && mkdir -p /out/bin && ln -s /api /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12 AS api
COPY --from=build /out/api /api
# Envoy Gateway runs /bin/ratelimit: started by that name, the API reads
# envoyproxy/ratelimit's environment.
COPY --from=build /out/bin /bin
EXPOSE 7070
ENTRYPOINT ["/api"]

FROM gcr.io/distroless/static-debian12 AS worker
COPY --from=build /out/worker /worker
EXPOSE 9080
ENTRYPOINT ["/worker"]
