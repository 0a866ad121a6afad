/** Builds the payments feature from its configuration and the shared database services. */
import type { ChangeBus } from '@gw/core';
import { RedemptionCodesRepo, TopupOrdersRepo, WebhookEventsRepo, type Db, type LedgerRepo, type UsersRepo } from '@gw/db';
import type { PaymentsConfig } from './config';
import { LedgerAdmin } from './ledger-admin';
import type { PaymentProvider, ProviderId } from './provider';
import { ProviderA } from './provider-a';
import { ProviderB } from './provider-b';
import { RedemptionService } from './redemption';
import { TopupService } from './topup-service';
import { WebhookService } from './webhook-service';

export interface Payments {
  config: PaymentsConfig;
  topups: TopupService;
  webhooks: WebhookService;
  ledgerAdmin: LedgerAdmin;
  /** Redemption codes: batches minted by admins, redeemed once by users. */
  redemption: RedemptionService;
  /** Ids of the providers that are configured (for clients choosing one). */
  providers: ProviderId[];
}

/** Only configured providers are registered; the others answer `provider_not_configured`. */
export function createPayments(cfg: PaymentsConfig, deps: { db: Db; users: UsersRepo; ledger: LedgerRepo; bus: ChangeBus }): Payments {
  const providers = new Map<ProviderId, PaymentProvider>();
  if (cfg.providerA) providers.set('providerA', new ProviderA(cfg.providerA, cfg.apiTimeoutMs));
  if (cfg.providerB) providers.set('providerB', new ProviderB(cfg.providerB, cfg.apiTimeoutMs));
  const orders = new TopupOrdersRepo(deps.db);
  return {
    config: cfg,
    topups: new TopupService(cfg, orders, providers),
    webhooks: new WebhookService(deps.db, orders, new WebhookEventsRepo(deps.db), deps.ledger, providers, deps.bus),
    ledgerAdmin: new LedgerAdmin(deps.db, deps.users, deps.ledger, deps.bus),
    redemption: new RedemptionService(deps.db, new RedemptionCodesRepo(deps.db), deps.ledger, deps.bus,
      { maxFailures: cfg.redeemMaxFailures, windowSeconds: cfg.redeemFailureWindowSeconds }),
    providers: [...providers.keys()],
  };
}
