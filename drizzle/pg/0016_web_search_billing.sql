ALTER TABLE "prices" ADD COLUMN "web_search" bigint;--> statement-breakpoint
ALTER TABLE "usage_logs" ADD COLUMN "web_search_requests" bigint DEFAULT 0 NOT NULL;