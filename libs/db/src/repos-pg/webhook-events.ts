import { and, eq } from 'drizzle-orm';
import type { PgDb } from '../pg/client';
import { webhookEvents } from '../schema-pg';
import type { WebhookEventRow } from '../repos/webhook-events';
import type { PgWriter } from './sql';

/** PostgreSQL twin of ../repos/webhook-events.ts (same methods, async). */
export class PgWebhookEventsRepo {
  constructor(private readonly db: PgDb) {}

  /**
   * Claims an event id inside the caller's transaction; false when already recorded. A concurrent
   * claim of the same id waits on the unique index for the first transaction, then does nothing.
   */
  async claim(e: { provider: string; eventId: string; type: string; at: number }, tx: PgWriter = this.db): Promise<boolean> {
    const rows = await tx.insert(webhookEvents)
      .values({ provider: e.provider, eventId: e.eventId, type: e.type, outcome: 'processing', receivedAt: e.at })
      .onConflictDoNothing().returning({ id: webhookEvents.id });
    return rows.length > 0;
  }

  async setOutcome(provider: string, eventId: string, outcome: string, tx: PgWriter = this.db): Promise<void> {
    await tx.update(webhookEvents).set({ outcome }).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId)));
  }

  async get(provider: string, eventId: string): Promise<WebhookEventRow | undefined> {
    return (await this.db.select().from(webhookEvents).where(and(eq(webhookEvents.provider, provider), eq(webhookEvents.eventId, eventId))))[0];
  }
}
