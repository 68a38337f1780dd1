# The one image behind web, worker, beat and migrate in docker-compose.yml.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /srv/goodput
COPY pyproject.toml setup.py constraints.txt README.md ./
COPY analysis ./analysis
COPY app ./app
COPY workers ./workers
COPY goodput_cli ./goodput_cli
COPY migrations ./migrations
COPY alembic.ini ./
# Editable: app.db finds migrations/ beside the packages. gcc builds the idle painting's sweep (setup.py), then goes.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir -c constraints.txt -e . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 goodput && mkdir /data && chown goodput /data
USER goodput
ENV GOODPUT_DATA_DIR=/data
EXPOSE 8000
CMD ["goodput", "serve"]
