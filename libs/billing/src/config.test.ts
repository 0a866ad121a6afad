import { expect, test } from 'bun:test';
import { billingConfig } from './config';

test('web searches: BILLING_WEB_SEARCH_PRICE defaults to QUOTA_PER_UNIT (one minor currency unit); WEB_SEARCH_MAX_USES to 10', () => {
  expect(billingConfig({})).toMatchObject({ webSearchPrice: 5000, webSearchMaxUses: 10 });
  expect(billingConfig({ QUOTA_PER_UNIT: '1000' }).webSearchPrice).toBe(1000);
  expect(billingConfig({ QUOTA_PER_UNIT: '1000', BILLING_WEB_SEARCH_PRICE: '0' }).webSearchPrice).toBe(0);
  expect(billingConfig({ WEB_SEARCH_MAX_USES: '3' }).webSearchMaxUses).toBe(3);
  expect(billingConfig({}).codeExecutionMaxCalls).toBe(20);
  expect(billingConfig({ CODE_EXECUTION_MAX_CALLS: '5' }).codeExecutionMaxCalls).toBe(5);
  expect(() => billingConfig({ CODE_EXECUTION_MAX_CALLS: '0' })).toThrow();
  expect(() => billingConfig({ BILLING_WEB_SEARCH_PRICE: '-1' })).toThrow(/BILLING_WEB_SEARCH_PRICE/);
  expect(() => billingConfig({ WEB_SEARCH_MAX_USES: '0' })).toThrow(/WEB_SEARCH_MAX_USES/);
});
