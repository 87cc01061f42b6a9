# One image for every jobwire process: jobapi, the worker service, fleet workers and the web gateway.
#
# The first stage builds the five distributions as `make dist` does (tools/build_dists.py; the
# jobwire-shared wheel compiles protos/ into jobwire.v1 as it builds); the image installs only
# those wheels, so no source folder and no build tool (grpcio-tools, build) is left in it.
FROM python:3.11-slim AS dist
WORKDIR /src
COPY constraints.txt VERSION ./
COPY protos ./protos
COPY shared ./shared
COPY services ./services
COPY tools ./tools
RUN pip install --no-cache-dir -c constraints.txt build && python tools/build_dists.py /dist

FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY constraints.txt ./
COPY --from=dist /dist /tmp/dist
# The five wheels by file, never a same-named project from an index; the servers' extras
# (store, metrics) and the OTLP exporter by name, on the same wheels.
RUN pip install --no-cache-dir -c constraints.txt /tmp/dist/*.whl 'jobwire-shared[db,otlp]' 'jobwire-worker[server]' \
 && rm -rf /tmp/dist \
 && mkdir -p /var/lib/jobwire/results && chown nobody /var/lib/jobwire/results
# The result store (JOBWIRE_RESULT_STORE); compose mounts one volume there for both servers.
USER nobody
EXPOSE 50051 50052 8080
CMD ["python", "-m", "jobwire", "serve"]
