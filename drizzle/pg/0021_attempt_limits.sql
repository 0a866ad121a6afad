-- Attempt limits that a loss of Redis's data must not reset (PostgreSQL mode). They lived in Redis, so a FLUSHALL,
-- a restart of a Redis that keeps nothing on disk, or a failover to an empty replica gave every locked unknown
-- username, every client address and every 2FA guesser a fresh budget. Kept out of the drizzle schema like
-- admission_start: only raw statements use them (libs/db/src/pg/attempt-windows.ts, libs/identity/src/unknown-lockout-pg.ts).
-- The account-flow attempt windows (login and reset per address, logins per username, 2FA code checks, current
-- password checks, redemption and top-up attempts): SQLite's attempt_windows (migration 0017), one row per key.
CREATE TABLE IF NOT EXISTS "attempt_windows" (
  "key" text PRIMARY KEY NOT NULL,
  "window_ms" bigint NOT NULL,
  "start" bigint NOT NULL,
  "cur" integer NOT NULL,
  "prev" integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "attempt_windows_start_idx" ON "attempt_windows" ("start");
--> statement-breakpoint
-- Lockout counters of usernames that do not exist (a stored account counts in its users row), by the SHA-256 of
-- the name, so the database never holds the names tried; a row is forgotten once `expires_ms` has passed.
CREATE TABLE IF NOT EXISTS "name_lockouts" (
  "name_hash" text PRIMARY KEY NOT NULL,
  "failed" integer NOT NULL,
  "locks" integer NOT NULL,
  "locked_until" bigint NOT NULL,
  "expires_ms" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "name_lockouts_expires_idx" ON "name_lockouts" ("expires_ms");
