ALTER TABLE "channels" ADD COLUMN "reasoning_echo" text DEFAULT 'auto' NOT NULL;--> statement-breakpoint
-- The channels update trigger names its columns (as in 0010): without reasoning_echo there, a change of it alone
-- was never heard by the other nodes, which kept the old setting.
DROP TRIGGER gw_change_channels_update ON channels;--> statement-breakpoint
CREATE TRIGGER gw_change_channels_update AFTER UPDATE OF
  id, name, type, base_url, key, models, model_mapping, "group", tag, priority, weight,
  status, timeout_ms, headers, header_policy, keys, key_selection, failure_rules,
  first_byte_timeout_ms, probe_interval_ms, status_reason, overrides, billing_model, reasoning_echo, created_at, updated_at
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
    OLD.reasoning_echo IS DISTINCT FROM NEW.reasoning_echo OR
    OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.updated_at IS DISTINCT FROM NEW.updated_at)
  EXECUTE FUNCTION gw_notify_change('id', 'id');
