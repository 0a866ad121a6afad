-- channels.overrides becomes json (kept as written) instead of jsonb (object keys re-sorted by length):
-- an override, and a value it sets, is shown and sent upstream in the order it was written, as on SQLite.
-- A column named by a trigger cannot change type, and json has no equality operator: the channels
-- update trigger is dropped, and recreated comparing overrides as text (otherwise as in 0008).
DROP TRIGGER gw_change_channels_update ON channels;--> statement-breakpoint
ALTER TABLE "channels" ALTER COLUMN "overrides" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "channels" ALTER COLUMN "overrides" SET DATA TYPE json USING "overrides"::json;--> statement-breakpoint
ALTER TABLE "channels" ALTER COLUMN "overrides" SET DEFAULT '[]'::json;--> statement-breakpoint
CREATE TRIGGER gw_change_channels_update AFTER UPDATE OF
  id, name, type, base_url, key, models, model_mapping, "group", tag, priority, weight,
  status, timeout_ms, headers, header_policy, keys, key_selection, failure_rules,
  first_byte_timeout_ms, probe_interval_ms, status_reason, overrides, billing_model, created_at, updated_at
  ON channels FOR EACH ROW WHEN (
    OLD.id IS DISTINCT FROM NEW.id OR OLD.name IS DISTINCT FROM NEW.name OR
    OLD.type IS DISTINCT FROM NEW.type OR OLD.base_url IS DISTINCT FROM NEW.base_url OR
    OLD.key IS DISTINCT FROM NEW.key OR OLD.models IS DISTINCT FROM NEW.models OR
    OLD.model_mapping IS DISTINCT FROM NEW.model_mapping OR
    OLD."group" IS DISTINCT FROM NEW."group" OR OLD.tag IS DISTINCT FROM NEW.tag OR
    OLD.priority IS DISTINCT FROM NEW.priority OR OLD.weight IS DISTINCT FROM NEW.weight OR
    OLD.status IS DISTINCT FROM NEW.status OR OLD.timeout_ms IS DISTINCT FROM NEW.timeout_ms OR
    OLD.headers IS DISTINCT FROM NEW.headers OR
    OLD.header_policy IS DISTINCT FROM NEW.header_policy OR OLD.keys IS DISTINCT FROM NEW.keys OR
    OLD.key_selection IS DISTINCT FROM NEW.key_selection OR
    OLD.failure_rules IS DISTINCT FROM NEW.failure_rules OR
    OLD.first_byte_timeout_ms IS DISTINCT FROM NEW.first_byte_timeout_ms OR
    OLD.probe_interval_ms IS DISTINCT FROM NEW.probe_interval_ms OR
    OLD.status_reason IS DISTINCT FROM NEW.status_reason OR
    OLD.overrides::text IS DISTINCT FROM NEW.overrides::text OR OLD.billing_model IS DISTINCT FROM NEW.billing_model OR
    OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.updated_at IS DISTINCT FROM NEW.updated_at)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
