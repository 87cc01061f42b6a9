# One image for every jobwire process: jobapi, the worker service, fleet workers and the web gateway.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY constraints.txt ./
COPY protos ./protos
COPY shared ./shared
COPY services ./services
# Generated code is built here, as `make proto` does, then the five distributions install.
# google/rpc/status.proto (worker.proto imports it) comes from googleapis-common-protos.
RUN pip install --no-cache-dir -c constraints.txt grpcio-tools googleapis-common-protos \
 && python -m grpc_tools.protoc -Iprotos \
      -I"$(python -c 'import google.rpc.status_pb2 as m, pathlib; print(pathlib.Path(m.__file__).parents[2])')" \
      --python_out=shared --grpc_python_out=shared protos/jobwire/v1/*.proto \
 && pip install --no-cache-dir -c constraints.txt './shared[db,otlp]' './services/worker[server]' ./services/jobapi ./services/server ./services/gateway \
 && pip uninstall -y grpcio-tools \
 && mkdir -p /var/lib/jobwire/results && chown nobody /var/lib/jobwire/results
# The result store (JOBWIRE_RESULT_STORE); compose mounts one volume there for both servers.
USER nobody
EXPOSE 50051 50052 8080
CMD ["python", "-m", "jobwire", "serve"]
