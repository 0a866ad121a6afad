/** Example bodies of the core requests, shown in the OpenAPI document and its UI. */
export const EXAMPLES: Record<string, unknown> = {
  'POST /v1/messages': {
    model: 'claude-sonnet-4-5', max_tokens: 1024, stream: false,
    system: 'You are a concise assistant.',
    messages: [{ role: 'user', content: 'Name three prime numbers.' }],
  },
  'POST /api/channel/batch': { ids: [3, 4, 9] },
  'POST /api/channel/tag/enabled': { tag: 'eu-west' },
  'PUT /api/channel/': { id: 3, priority: 10, weight: 5, models: ['claude-sonnet-4-5', 'claude-haiku-4-5'] },
  'POST /api/user/': { username: 'alice', password: 'alice-password-1', display_name: 'Alice', role: 1, group: 'default', quota: 500000, email: 'alice@example.com' },
  'POST /api/user/2fa/enable': { code: '123456', current_password: 'alice-password-1' },
  'POST /api/user/2fa/disable': { code: '123456' },
  'POST /api/user/reset': { email: 'alice@example.com', token: 'the-token-from-the-e-mail', password: 'a-new-password-1' },
  'POST /api/providerA/webhook': {
    id: 'evt_1Q2w3E4r5T6y', type: 'checkout.session.completed',
    data: { object: { id: 'cs_test_a1B2c3', client_reference_id: 'T1732363200000abc', payment_status: 'paid', amount_total: 1000, currency: 'usd' } },
  },
  'POST /api/providerB/webhook': {
    id: 'evt_5Xy7Zq', eventType: 'checkout.completed',
    object: { id: 'ch_3kP9', request_id: 'T1732363200000abc', product: 'prod_123', order: { amount: 1000, currency: 'USD', status: 'paid', product: 'prod_123' } },
  },
};
