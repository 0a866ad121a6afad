ALTER TABLE "topup_reversals" ADD COLUMN "gross" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "topup_reversals" ADD COLUMN "as_of" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "topup_reversals" ADD COLUMN "since" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Charge rows stated their running total in amount until now.
UPDATE "topup_reversals" SET "gross" = "amount" WHERE "state" = 'refunded';