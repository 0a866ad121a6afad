ALTER TABLE `api_keys` ADD `model_limits` text;--> statement-breakpoint
ALTER TABLE `groups` ADD `model_limits` text;--> statement-breakpoint
ALTER TABLE `users` ADD `model_limits` text;