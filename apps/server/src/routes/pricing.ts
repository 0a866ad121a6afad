/** Admin CRUD of model prices (quota units per million tokens; web searches per search). */
import { Elysia, t } from 'elysia';
import { GatewayError, ok } from '@gw/core';
import { PriceInput, PriceView, toPriceView } from '@gw/billing';
import { authPlugin } from '../plugins/auth';
import type { Services } from '../services';
import { envelope } from './envelope';

const PriceOut = t.Intersect([PriceView, t.Object({ updated_at: t.Integer() })]);

export const pricingRoutes = (s: Services) =>
  new Elysia({ name: 'pricing-routes', prefix: '/api/pricing' })
    .use(authPlugin(s))
    .get('/', () => ok(s.relay.prices.list().map(toPriceView)), {
      role: 'admin', response: envelope(t.Array(PriceOut)), detail: { tags: ['pricing'], summary: 'List prices', description: 'Every model price, in quota units per million tokens (web_search: per search; null = BILLING_WEB_SEARCH_PRICE; code_execution: per code-execution call; null = not priced, requests with the tool are refused 403 tool_not_priced).' },
    })
    .get('/:model', ({ params }) => {
      const p = s.relay.prices.get(params.model);
      if (!p) throw new GatewayError(404, 'price_not_found', `No price for model ${params.model}`, { param: 'model' });
      return ok(toPriceView(p));
    }, { role: 'admin', response: envelope(PriceOut), detail: { tags: ['pricing'], summary: 'Get a price', description: 'The price of one model.' } })
    .put('/', async ({ body }) => ok(toPriceView(await s.relay.prices.upsert(body))), {
      role: 'admin', body: PriceInput, response: envelope(PriceOut),
      detail: { tags: ['pricing'], summary: 'Set a price', description: 'Creates or replaces a model\'s price: integers, quota units per million tokens, for input, output, cache reads and cache writes; '
        + 'web_search in quota units per search (Anthropic\'s web_search server tool; null or absent = the server\'s BILLING_WEB_SEARCH_PRICE); '
        + 'code_execution in quota units per code-execution call (Anthropic\'s code-execution server tool; container price per hour × the time billed per call; '
        + 'null or absent = not priced: requests with the tool are refused 403 tool_not_priced). Applies to the next request.' },
    })
    .delete('/:model', async ({ params }) => {
      await s.relay.prices.delete(params.model);
      return ok(null);
    }, { role: 'admin', response: envelope(t.Null()), detail: { tags: ['pricing'], summary: 'Delete a price', description: 'Removes a model\'s price. Unpriced models are refused (403 model_not_priced) unless BILLING_REQUIRE_PRICE is off.' } });
