/**
 * The request and response schemas the OpenAPI document names in `components.schemas`. They are the
 * same objects that validate requests (imported, never copied). Each gets its name as `title` (an
 * annotation: validation ignores it), which survives the generator's rewriting of the schema; the
 * document builder then hoists every titled schema into the components and references it by name.
 */
import type { TSchema } from '@sinclair/typebox';
import { ChannelCreate, ChannelTestResult, ChannelUpdate, ChannelView } from '@gw/channels';
import { AccessTokenView, ApiKeyCreate, ApiKeyUpdate, ApiKeyView, UserCreate, UserSelfUpdate, UserUpdate, UserView } from '@gw/identity';
import { PriceInput, PriceView, UsageLogView } from '@gw/billing';
import { CodesCreatedView, LedgerEntryView, RedemptionBatchView, RedemptionCodeView, TopupCreatedView, TopupOrderView } from '@gw/payments';
import { ModelInfoSchema, ModelPageSchema } from '@gw/relay';
import { AnthropicMessageSchema, CountTokensRequestSchema, MessagesRequestSchema } from '@gw/formats';

export const NAMED_SCHEMAS: Record<string, TSchema> = {
  MessagesRequest: MessagesRequestSchema,
  CountTokensRequest: CountTokensRequestSchema,
  Message: AnthropicMessageSchema,
  ModelInfo: ModelInfoSchema,
  ModelPage: ModelPageSchema,
  UserView, UserCreate, UserUpdate, UserSelfUpdate, AccessTokenView,
  ApiKeyView, ApiKeyCreate, ApiKeyUpdate,
  ChannelView, ChannelCreate, ChannelUpdate, ChannelTestResult,
  PriceView, PriceInput, UsageLogView,
  TopupOrderView, TopupCreatedView, LedgerEntryView,
  RedemptionCodeView, RedemptionBatchView, CodesCreatedView,
};

for (const [name, schema] of Object.entries(NAMED_SCHEMAS)) (schema as { title?: string }).title = name;
