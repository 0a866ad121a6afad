-- Realtime responses still running, each as it would be billed if its node died now (PostgreSQL mode): SQLite's
-- realtime_unfinished (migration 0019) with the ref of the response's hold, by which the leader's reconciler finds
-- the rows of a hold whose lease lapsed (its node stopped renewing it) and bills them once, by request id, before
-- releasing the hold. Written by the node running the response, off its request path; a row whose request is
-- settled is deleted. Kept out of the drizzle schema like attempt_windows: only raw statements use it
-- (libs/db/src/pg/realtime-unfinished.ts).
CREATE TABLE IF NOT EXISTS "realtime_unfinished" (
  "request_id" text PRIMARY KEY NOT NULL,
  "hold_ref" text NOT NULL,
  "row" text NOT NULL,
  "updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "realtime_unfinished_hold_idx" ON "realtime_unfinished" ("hold_ref");
