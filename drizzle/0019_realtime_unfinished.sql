CREATE TABLE `realtime_unfinished` (
	`request_id` text PRIMARY KEY NOT NULL,
	`row` text NOT NULL,
	`updated_at` integer NOT NULL
);
