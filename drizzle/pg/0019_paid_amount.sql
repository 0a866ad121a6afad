ALTER TABLE "topup_orders" ADD COLUMN "paid_amount" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "topup_orders" ADD COLUMN "paid_currency" text DEFAULT '' NOT NULL;