ALTER TABLE "prices" ADD COLUMN "code_execution" bigint;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "code_execution_requests" bigint DEFAULT 0 NOT NULL;