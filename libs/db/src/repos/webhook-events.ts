import { and, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { webhookEvents } from '../schema';
import type { DbWriter } from './topup-orders';

export type WebhookEventRow = typeof webhookEvents.$inferSelect;

/** Processed webhook event ids: the exactly-once guard (unique provider + event id). */
export class WebhookEventsRepo {
  constructor(private readonly db: Db) {}

  /**
   * Claims an event id inside the caller's transaction. False when it was already recorded: the
   * caller must then change nothing. The unique index makes this hold across processes too.
   */
  claim(e: { provider: string; eventId: string; type: string; at: number }, tx: DbWriter = this.db): boolean {
    const row = tx.insert(webhookEvents)
      .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
      .onConflictDoNothing().returning({ id: webhookEvents.id }).get();
    return row !== undefined;
  }

  setOutcome(provider: string, eventId: string, outcome: string, tx: DbWriter = this.db): void {
    tx.update(webhookEvents).set({ outcome }).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId))).run();
  }

  get(provider: string, eventId: string): WebhookEventRow | undefined {
    return this.db.select().from(webhookEvents).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId))).get();
  }
}
