/** Builds the payments feature from its configuration and the shared database services. */
import type { AttemptWindows, ChangeBus, Logger } from '@gw/core';
import type { LedgerStore, RedemptionCodesStore, TopupOrdersStore, UsersStore } from '@gw/db';
import type { PaymentsConfig } from './config';
import { DisputeReinstatement } from './dispute-reinstate';
import { LedgerAdmin } from './ledger-admin';
import type { PaymentProvider, ProviderId } from './provider';
import type { SharedKeyLock } from './turns';
import { ProviderA } from './provider-a';
import { ProviderB } from './provider-b';
import { RedemptionService } from './redemption';
import { TopupService } from './topup-service';
import { WebhookService } from './webhook-service';

export interface Payments {
  config: PaymentsConfig;
  topups: TopupService;
  webhooks: WebhookService;
  /** An operator's record of a won dispute (providers that send no event for it). */
  disputes: DisputeReinstatement;
  ledgerAdmin: LedgerAdmin;
  /** Redemption codes: batches minted by admins, redeemed once by users. */
  redemption: RedemptionService;
  /** Ids of the providers that are configured (for clients choosing one). */
  providers: ProviderId[];
}

/** Only configured providers are registered; the others answer `provider_not_configured`. */
export function createPayments(cfg: PaymentsConfig, deps: {
  users: UsersStore; ledger: LedgerStore; topupOrders: TopupOrdersStore; redemptionCodes: RedemptionCodesStore; bus: ChangeBus;
  /** Where invalid-code attempts and order creations count (default this process; shared by every node in PostgreSQL mode). */
  windows?: AttemptWindows;
  /** A per-key lock every node shares (PostgreSQL + Redis mode): one redemption attempt of a user at a time in the cluster. */
  sharedTurns?: SharedKeyLock | null;
  /** Where a paid top-up that found no room under MAX_BALANCE is reported (`topup.balance_limit`). */
  log?: Logger;
}): Payments {
  const providers = new Map<ProviderId, PaymentProvider>();
  if (cfg.providerA) providers.set('providerA', new ProviderA(cfg.providerA, cfg.apiTimeoutMs));
  if (cfg.providerB) providers.set('providerB', new ProviderB(cfg.providerB, cfg.apiTimeoutMs));
  return {
    config: cfg,
    topups: new TopupService(cfg, deps.topupOrders, providers, deps.windows),
    webhooks: new WebhookService(deps.ledger, providers, deps.bus, deps.log),
    disputes: new DisputeReinstatement(deps.ledger, deps.topupOrders, deps.bus),
    ledgerAdmin: new LedgerAdmin(deps.users, deps.ledger, deps.bus),
    redemption: new RedemptionService(deps.redemptionCodes, deps.ledger, deps.bus,
      { maxFailures: cfg.redeemMaxFailures, windowSeconds: cfg.redeemFailureWindowSeconds }, deps.users, Date.now, deps.windows, deps.sharedTurns ?? null),
    providers: [...providers.keys()],
  };
}
