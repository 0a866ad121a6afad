/** Admin CRUD of model prices (quota units per million tokens). */
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
      role: 'admin', response: envelope(t.Array(PriceOut)), detail: { tags: ['pricing'], summary: 'All model prices' },
    })
    .get('/:model', ({ params }) => {
      const p = s.relay.prices.get(params.model);
      if (!p) throw new GatewayError(404, 'price_not_found', `No price for model ${params.model}`, { param: 'model' });
      return ok(toPriceView(p));
    }, { role: 'admin', response: envelope(PriceOut), detail: { tags: ['pricing'], summary: 'One model price' } })
    .put('/', ({ body }) => ok(toPriceView(s.relay.prices.upsert(body))), {
      role: 'admin', body: PriceInput, response: envelope(PriceOut),
      detail: { tags: ['pricing'], summary: 'Create or replace a model price (integers, quota units per million tokens)' },
    })
    .delete('/:model', ({ params }) => {
      s.relay.prices.delete(params.model);
      return ok(null);
    }, { role: 'admin', response: envelope(t.Null()), detail: { tags: ['pricing'], summary: 'Delete a model price' } });
