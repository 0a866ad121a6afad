ALTER TABLE "channels" ADD COLUMN "header_policy" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "cache_write_1h" bigint;--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "long_context_threshold" bigint;--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "long_context" jsonb;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "cache_write_1h_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "long_context" boolean DEFAULT false NOT NULL;