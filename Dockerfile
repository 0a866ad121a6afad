# The gateway: Bun 1.4.4 running the server from source, production dependencies only.
# Built by docker-compose.yml for every node; the same image serves SQLite (one node) or PostgreSQL mode.
FROM oven/bun:1.4.4

WORKDIR /app
# The whole workspace (see .dockerignore): every @gw/* package is linked from it by `bun install`.
COPY . .
RUN bun install --frozen-lockfile --production \
 && mkdir -p /app/data && chown bun:bun /app/data

# SQLite mode keeps its database and key file in /app/data; PostgreSQL mode writes nothing there.
VOLUME ["/app/data"]
USER bun
ENV PORT=3000 HOST=0.0.0.0
EXPOSE 3000

# No curl in the image: Bun asks /health itself.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
  CMD ["bun", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

# Run the entry directly (not through `bun run` or a shell) so SIGTERM reaches it and it stops gracefully:
# open streams finish, settlements are committed, realtime sessions close with 1001.
CMD ["bun", "apps/server/src/index.ts"]
