import { sqliteTable, integer, text, index, uniqueIndex } from 'drizzle-orm/sqlite-core';

/** One row per realtime WebSocket session, written when it ends. */
export const realtimeSessions = sqliteTable('realtime_sessions', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  sessionId: text('session_id').notNull(),
  userId: integer('user_id').notNull(),
  apiKeyId: integer('api_key_id').notNull(),
  channelId: integer('channel_id'),
  model: text('model').notNull(),
  startedAt: integer('started_at').notNull(),
  endedAt: integer('ended_at').notNull(),
  durationMs: integer('duration_ms').notNull(),
  framesIn: integer('frames_in').notNull().default(0),
  framesOut: integer('frames_out').notNull().default(0),
  bytesIn: integer('bytes_in').notNull().default(0),
  bytesOut: integer('bytes_out').notNull().default(0),
  responses: integer('responses').notNull().default(0),
  cost: integer('cost').notNull().default(0),
  closeCode: integer('close_code').notNull().default(0),
  closeReason: text('close_reason').notNull().default(''),
}, (t) => [uniqueIndex('realtime_sessions_uq').on(t.sessionId), index('realtime_sessions_user_idx').on(t.userId)]);

/**
 * Settlements of realtime responses and long /v1/messages streams still running (the name is from when only realtime
 * kept them), each as it would be billed if the process died now (its
 * estimate so far, capped by its hold), kept until the response is settled. A process that starts on this
 * database writes what a killed predecessor left here (skipping request ids already billed) and empties it.
 * SQLite only: one process owns the database, so whatever is here at start-up belongs to a dead one.
 */
export const realtimeUnfinished = sqliteTable('realtime_unfinished', {
  requestId: text('request_id').primaryKey(),
  /** The SettlementRow (JSON) billed at recovery. */
  row: text('row').notNull(),
  updatedAt: integer('updated_at').notNull(),
});
