-- A key set to its owner's own group now stores NULL ("the owner's group"), so it moves with its owner: a user moved out of
-- a group (a discount, a private channel) by an admin no longer keeps it through keys made while in it. Keys whose group
-- equals their owner's today route the same either way; a key an admin put in another group keeps it.
UPDATE "api_keys" SET "group" = NULL
  WHERE "group" IS NOT NULL AND "group" = (SELECT "users"."group" FROM "users" WHERE "users"."id" = "api_keys"."user_id");
