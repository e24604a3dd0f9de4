FROM python:3.11-slim

WORKDIR /srv
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

COPY pyproject.toml README.md alembic.ini ./
COPY bounded_agents bounded_agents
COPY migrations migrations
RUN pip install --no-cache-dir .
COPY app app

EXPOSE 8000
# Migrations run at start-up (AGENT_MIGRATE_ON_START, default true).
CMD ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
