ALTER TABLE "api_keys" ADD COLUMN "model_limits" jsonb;--> statement-breakpoint
ALTER TABLE "groups" ADD COLUMN "model_limits" jsonb;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "model_limits" jsonb;