# oahu: streaming online metric learning, served while it learns.
#   docker build -t oahu .
#   docker run -p 8000:8000 oahu                      # learns the bundled digits stream
#   docker run -p 8000:8000 oahu run --source 'kafka://kafka:9092/constraints?group=oahu' ...
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# CPU build of torch first (the default wheel would pull in several GB of CUDA libraries);
# the project's own dependencies then find torch already satisfied.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2"

# streams/ and connectors/ install as oahu.streams and oahu.connectors (pyproject.toml), so the
# sources are built from /src and the import check runs where no oahu/ folder shadows the install.
COPY pyproject.toml README.md /src/
COPY oahu /src/oahu
COPY streams /src/streams
COPY connectors /src/connectors
RUN pip install /src && rm -rf /src && python -c "import oahu.service.serving.app, oahu.streams, oahu.connectors"

RUN useradd --create-home --uid 10001 oahu && mkdir -p /var/lib/oahu && chown oahu /var/lib/oahu
USER oahu
VOLUME ["/var/lib/oahu"]

ENV OAHU_CHECKPOINT_DIR=/var/lib/oahu \
    OAHU_HTTP=0.0.0.0:8000
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"

# SIGTERM (docker stop) checkpoints, commits offsets and exits 0; give it time to do so.
STOPSIGNAL SIGTERM
ENTRYPOINT ["oahu"]
CMD ["run"]
