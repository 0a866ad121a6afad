export * from './client';
export * as schema from './schema';
export * from './schema';
export * from './repos/users';
export * from './repos/sessions';
export * from './repos/ledger';
export * from './repos/channels';
export * from './repos/api-keys';
export * from './repos/prices';
export * from './repos/usage-logs';
export * from './repos/topup-orders';
export * from './repos/webhook-events';
export * from './repos/security';
export * from './repos/realtime-sessions';
export * from './repos/settlements';
// PostgreSQL (multi-node mode). Its tables have the same names as the SQLite ones, so they are
// exported as the `pgSchema` namespace only.
export * as pgSchema from './schema-pg';
export { openPostgres, PG_MIGRATIONS_DIR, type PgDb, type PgHandle, type PgSql, type OpenPostgresOptions } from './pg/client';
export { applyPgMigrations } from './pg/migrate';
export { copySqliteToPostgres, copyOrder, CopyError, type CopyOptions } from './copy';
