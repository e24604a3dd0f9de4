FROM python:3.11-slim

WORKDIR /srv
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

COPY pyproject.toml README.md alembic.ini ./
COPY app app
COPY migrations migrations
RUN pip install --no-cache-dir -e .

EXPOSE 8000
# Migrations run at start-up (AGENT_MIGRATE_ON_START, default true).
CMD ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
