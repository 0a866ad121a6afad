import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'sqlite',
  schema: './libs/db/src/schema/index.ts',
  out: './drizzle',
});
