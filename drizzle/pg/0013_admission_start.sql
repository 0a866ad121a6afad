-- The shared admission's first start (PostgreSQL mode). A node that finds no admission epoch in Redis cannot
-- tell a new Redis prefix from one that lost its data, and so waits out a recovery window (503) in which the
-- other nodes put back the holds Redis may have lost. Holds exist only once some node has started admission,
-- and starting it claims this row first: the node whose INSERT creates it knows that no node ever admitted
-- anything here, and opens the epoch at once, inside the same transaction (a node starting beside it waits on
-- the row until that commits). Kept out of the drizzle schema: only raw statements read it (libs/db/src/pg/admission-start.ts).
CREATE TABLE IF NOT EXISTS "admission_start" (
  "id" integer PRIMARY KEY CHECK ("id" = 1),
  "started_at" bigint NOT NULL
);
--> statement-breakpoint
-- A database that already served requests has started admission before this table existed.
INSERT INTO "admission_start" ("id", "started_at")
  SELECT 1, 0 WHERE EXISTS (SELECT 1 FROM "usage_logs") OR EXISTS (SELECT 1 FROM "ledger" WHERE "kind" = 'charge')
  ON CONFLICT ("id") DO NOTHING;
