import { and, eq } from 'drizzle-orm';
import type { Db } from '../client';
import { webhookEvents } from '../schema';

export type WebhookEventRow = typeof webhookEvents.$inferSelect;

/** Processed webhook event ids: storage interface. */
export interface WebhookEventsStore {
  /**
   * Claims an event id. False when it was already recorded: the caller must then change nothing. The
   * unique index makes this hold across processes too (ledger.creditTopupOnce claims inside its transaction).
   */
  claim(e: { provider: string; eventId: string; type: string; at: number }): Promise<boolean>;
  setOutcome(provider: string, eventId: string, outcome: string): Promise<void>;
  get(provider: string, eventId: string): Promise<WebhookEventRow | undefined>;
}

/** Processed webhook event ids: the exactly-once guard (unique provider + event id). */
export class WebhookEventsRepo implements WebhookEventsStore {
  constructor(private readonly db: Db) {}

  /**
   * Claims an event id. False when it was already recorded: the caller must then change nothing. The
   * unique index makes this hold across processes too (ledger.creditTopupOnce claims inside its transaction).
   */
  async claim(e: { provider: string; eventId: string; type: string; at: number }): Promise<boolean> {
    const row = this.db.insert(webhookEvents)
      .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
      .onConflictDoNothing().returning({ id: webhookEvents.id }).get();
    return row !== undefined;
  }

  async setOutcome(provider: string, eventId: string, outcome: string): Promise<void> {
    this.db.update(webhookEvents).set({ outcome }).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId))).run();
  }

  async get(provider: string, eventId: string): Promise<WebhookEventRow | undefined> {
    return this.db.select().from(webhookEvents).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId))).get();
  }
}
