import { pgTable, integer, text, index, uniqueIndex } from 'drizzle-orm/pg-core';
import { big, idColumn } from './columns';

/** PostgreSQL twin of ../schema/realtime.ts: same exports, property names and column names. */

export const realtimeSessions = pgTable('realtime_sessions', {
  id: idColumn(),
  sessionId: text('session_id').notNull(),
  userId: big('user_id').notNull(),
  apiKeyId: big('api_key_id').notNull(),
  channelId: big('channel_id'),
  model: text('model').notNull(),
  startedAt: big('started_at').notNull(),
  endedAt: big('ended_at').notNull(),
  durationMs: big('duration_ms').notNull(),
  framesIn: big('frames_in').notNull().default(0),
  framesOut: big('frames_out').notNull().default(0),
  bytesIn: big('bytes_in').notNull().default(0),
  bytesOut: big('bytes_out').notNull().default(0),
  responses: big('responses').notNull().default(0),
  cost: big('cost').notNull().default(0),
  closeCode: integer('close_code').notNull().default(0),
  closeReason: text('close_reason').notNull().default(''),
}, (t) => [uniqueIndex('realtime_sessions_uq').on(t.sessionId), index('realtime_sessions_user_idx').on(t.userId)]);
