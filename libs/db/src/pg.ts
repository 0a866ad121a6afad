/**
 * PostgreSQL side of @gw/db (multi-node mode), as the subpath `@gw/db/pg`. Kept out of the root
 * index so a SQLite-only process does not load postgres.js and the pg schema (~70 ms at start-up).
 * The tables have the same names as the SQLite ones, hence the `pgSchema` namespace.
 */
export * as pgSchema from './schema-pg';
export { openPostgres, PG_MIGRATIONS_DIR, type OpenPostgresOptions, type PgDb, type PgHandle, type PgSql } from './pg/client';
export { applyPgMigrations } from './pg/migrate';
export { admissionStartedAt, claimAdmissionStart } from './pg/admission-start';
export { PgAdvisoryLeader, leaderLockKey, type PgLeaderOptions } from './pg/leader';
export { createPgStores } from './pg/stores';
export { PgChangeFeed, CHANGE_CHANNEL, type PgChangeFeedOptions } from './pg/change-feed';
export { PgGroupCommitter, SettlementUnavailableError, isTransientPgError, type GroupCommitOptions } from './pg/group-commit';
export { copyOrder, CopyError, copySqliteToPostgres, type CopyOptions } from './copy';
export * from './repos-pg';
export { PG_SWEEP, pgAttemptWindows, pgSweepAttemptWindows } from './pg/attempt-windows';
export { PgRealtimeUnfinished, pgUnfinishedRows, type UnfinishedRows } from './pg/realtime-unfinished';
