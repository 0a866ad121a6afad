/**
 * One contract for the repositories, run against every implementation: each suite takes a factory
 * that returns an empty database with every repository over it, and makes identical assertions.
 * Called from repos-contract/sqlite.test.ts and repos-pg/contract.test.ts.
 */
import { billingContract } from './billing.contract';
import { budgetsContract } from './budgets.contract';
import { channelsContract } from './channels.contract';
import type { MakeEnv } from './env';
import { identityContract } from './identity.contract';
import { paymentsContract } from './payments.contract';

export type { Awaitable, ContractEnv, ContractRepos, MakeEnv } from './env';

export function repoContract(make: MakeEnv): void {
  identityContract(make);
  channelsContract(make);
  billingContract(make);
  paymentsContract(make);
  budgetsContract(make);
}
export { attemptWindowsContract, type AttemptWindowsEnv } from './attempt-windows.contract';
