ALTER TABLE "channels" ADD COLUMN "overrides" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "channels" ADD COLUMN "billing_model" text DEFAULT 'requested' NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "billed_model" text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "overrides" text DEFAULT '' NOT NULL;