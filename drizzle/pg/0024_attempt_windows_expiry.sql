-- The sweep of idle attempt windows (every 1024 hits, libs/db/src/pg/attempt-windows.ts) read the whole table: its
-- condition was an expression of two columns, which no index had. Now it is a generated column, which PostgreSQL
-- computes for the existing rows here and on every write after (the hit's upsert and its update branch alike),
-- with an index the sweep reads a range of. The index on "start" served nothing else and is dropped. Kept out of
-- the drizzle schema like the table itself (migration 0021).
ALTER TABLE "attempt_windows" ADD COLUMN IF NOT EXISTS "expires_at" bigint GENERATED ALWAYS AS ("start" + 2 * "window_ms") STORED;
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "attempt_windows_expires_idx" ON "attempt_windows" ("expires_at");
--> statement-breakpoint
DROP INDEX IF EXISTS "attempt_windows_start_idx";
