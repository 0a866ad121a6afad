import { defineConfig } from 'drizzle-kit';

/** PostgreSQL migrations (multi-node mode). The SQLite ones stay in ./drizzle (drizzle.config.ts). */
export default defineConfig({
  dialect: 'postgresql',
  schema: './libs/db/src/schema-pg/index.ts',
  out: './drizzle/pg',
});
