ALTER TABLE "channels" ADD COLUMN "keys" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "channels" ADD COLUMN "key_selection" text DEFAULT 'random' NOT NULL;--> statement-breakpoint
ALTER TABLE "channels" ADD COLUMN "failure_rules" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "channels" ADD COLUMN "first_byte_timeout_ms" integer;--> statement-breakpoint
ALTER TABLE "channels" ADD COLUMN "probe_interval_ms" bigint;