# The Rollscope web app (and CLI). Built by docker-compose.yml; not needed for `make demo`.
FROM python:3.11-slim
WORKDIR /srv/rollscope
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY ingest ./ingest
COPY templates ./templates
COPY static ./static
RUN pip install --no-cache-dir -e . && python -m app.static_files
ENV ROLLSCOPE_DATABASE_URL=sqlite:////data/rollscope.db \
    PYTHONUNBUFFERED=1
EXPOSE 8000
CMD ["rollscope", "serve", "--host", "0.0.0.0", "--port", "8000"]
