-- The schema the migrations give a new SQLite store, up to revision 0024.
-- Written by `python -m auditor_migrations.write_sqlite_head`: do not edit.
-- revision: 0024

CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

CREATE TABLE ingest_errors (
	id INTEGER NOT NULL, 
	path TEXT NOT NULL, 
	line INTEGER, 
	error TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_ingest_errors PRIMARY KEY (id)
);

CREATE TABLE messages (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	source_file_id INTEGER, 
	native_id VARCHAR(255) NOT NULL, 
	parent_native_id VARCHAR(255), 
	seq BIGINT NOT NULL, 
	line INTEGER, 
	role VARCHAR(16) NOT NULL, 
	source_type VARCHAR(32), 
	timestamp DATETIME, 
	model VARCHAR(128), 
	usage_key VARCHAR(255), 
	stop_reason VARCHAR(64), 
	is_sidechain BOOLEAN NOT NULL, 
	tool_use_count INTEGER NOT NULL, 
	file_edit_count INTEGER NOT NULL, 
	blocks JSON, 
	CONSTRAINT pk_messages PRIMARY KEY (id), 
	CONSTRAINT fk_messages_source_file_id_source_files FOREIGN KEY(source_file_id) REFERENCES source_files (id) ON DELETE SET NULL, 
	CONSTRAINT fk_messages_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT uq_messages_thread_id_native_id UNIQUE (thread_id, native_id)
);

CREATE TABLE runs (
	id INTEGER NOT NULL, 
	started_at DATETIME NOT NULL, 
	ended_at DATETIME, 
	status VARCHAR(16) NOT NULL, 
	observer VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	prompt_version VARCHAR(64), 
	prompt_hash VARCHAR(64), 
	dry_run BOOLEAN NOT NULL, 
	config JSON, 
	checkpoints INTEGER NOT NULL, 
	gated_in INTEGER NOT NULL, 
	audited INTEGER NOT NULL, 
	reused INTEGER NOT NULL, 
	corrections INTEGER NOT NULL, 
	invalid INTEGER NOT NULL, 
	errors INTEGER NOT NULL, 
	cost_usd DOUBLE NOT NULL, 
	error TEXT, owner VARCHAR(255), heartbeat_at DATETIME, 
	CONSTRAINT pk_runs PRIMARY KEY (id)
);

CREATE TABLE checkpoints (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	message_native_id VARCHAR(255) NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	tool_calls INTEGER NOT NULL, 
	file_edits INTEGER NOT NULL, 
	gate_audit BOOLEAN NOT NULL, 
	gate_reason VARCHAR(128) NOT NULL, 
	gated_at DATETIME NOT NULL, 
	run_id INTEGER, gate_code VARCHAR(128), 
	CONSTRAINT pk_checkpoints PRIMARY KEY (id), 
	CONSTRAINT fk_checkpoints_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE SET NULL, 
	CONSTRAINT fk_checkpoints_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT uq_checkpoints_thread_id_message_native_id_kind UNIQUE (thread_id, message_native_id, kind)
);

CREATE TABLE verdicts (
	id INTEGER NOT NULL, 
	checkpoint_id INTEGER NOT NULL, 
	run_id INTEGER, 
	thread_id INTEGER NOT NULL, 
	observer VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	prompt_version VARCHAR(64), 
	prompt_hash VARCHAR(64) NOT NULL, 
	input_hash VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	needs_correction BOOLEAN, 
	message TEXT, 
	problem TEXT, 
	raw JSON, 
	latency_ms INTEGER, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	thinking_tokens INTEGER NOT NULL, 
	cache_write_tokens INTEGER NOT NULL, 
	cost_usd DOUBLE, 
	credits DOUBLE, 
	created_at DATETIME NOT NULL, critique_of INTEGER, raw_bytes INTEGER, batch_id INTEGER, same_vendor BOOLEAN, 
	CONSTRAINT pk_verdicts PRIMARY KEY (id), 
	CONSTRAINT fk_verdicts_checkpoint_id_checkpoints FOREIGN KEY(checkpoint_id) REFERENCES checkpoints (id) ON DELETE CASCADE, 
	CONSTRAINT fk_verdicts_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE SET NULL, 
	CONSTRAINT fk_verdicts_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);

CREATE TABLE "token_usage" (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	"key" VARCHAR(255) NOT NULL, 
	model VARCHAR(128), 
	timestamp DATETIME, 
	input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	cache_read_tokens BIGINT NOT NULL, 
	cache_write_tokens BIGINT NOT NULL, 
	reasoning_tokens BIGINT NOT NULL, 
	source_file_id INTEGER, 
	CONSTRAINT pk_token_usage PRIMARY KEY (id), 
	CONSTRAINT uq_token_usage_thread_id_key UNIQUE (thread_id, "key"), 
	CONSTRAINT fk_token_usage_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT fk_token_usage_source_file_id_source_files FOREIGN KEY(source_file_id) REFERENCES source_files (id) ON DELETE SET NULL
);

CREATE TABLE "tool_calls" (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	call_id VARCHAR(255) NOT NULL, 
	name VARCHAR(255), 
	call_message_id VARCHAR(255), 
	result_message_id VARCHAR(255), 
	is_error BOOLEAN, 
	is_file_edit BOOLEAN NOT NULL, 
	edited_paths JSON, 
	source_file_id INTEGER, 
	CONSTRAINT pk_tool_calls PRIMARY KEY (id), 
	CONSTRAINT fk_tool_calls_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT uq_tool_calls_thread_id_call_id UNIQUE (thread_id, call_id), 
	CONSTRAINT fk_tool_calls_source_file_id_source_files FOREIGN KEY(source_file_id) REFERENCES source_files (id) ON DELETE SET NULL
);

CREATE TABLE injections (
	id INTEGER NOT NULL, 
	verdict_id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	injector VARCHAR(64) NOT NULL, 
	target TEXT, 
	turn_key VARCHAR(255), 
	message_hash VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	error TEXT, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_injections PRIMARY KEY (id), 
	CONSTRAINT fk_injections_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT fk_injections_verdict_id_verdicts FOREIGN KEY(verdict_id) REFERENCES verdicts (id) ON DELETE CASCADE
);

CREATE TABLE signals (
	id INTEGER NOT NULL, 
	checkpoint_id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	score DOUBLE NOT NULL, 
	evidence JSON, 
	detail JSON, 
	computed_at DATETIME NOT NULL, 
	CONSTRAINT pk_signals PRIMARY KEY (id), 
	CONSTRAINT fk_signals_checkpoint_id_checkpoints FOREIGN KEY(checkpoint_id) REFERENCES checkpoints (id) ON DELETE CASCADE, 
	CONSTRAINT fk_signals_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);

CREATE TABLE events (
	id INTEGER NOT NULL, 
	at DATETIME NOT NULL, 
	type VARCHAR(32) NOT NULL, 
	run_id INTEGER, 
	thread_id INTEGER, 
	checkpoint_id INTEGER, 
	verdict_id INTEGER, 
	subject TEXT, 
	data JSON, 
	CONSTRAINT pk_events PRIMARY KEY (id)
);

CREATE TABLE usage_rollup_state (
	id INTEGER NOT NULL, 
	thresholds TEXT NOT NULL, 
	CONSTRAINT pk_usage_rollup_state PRIMARY KEY (id)
);

CREATE TABLE usage_rollup (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	day VARCHAR(10), 
	model VARCHAR(128), 
	band INTEGER NOT NULL, 
	calls INTEGER NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	cache_read_tokens BIGINT NOT NULL, 
	cache_write_tokens BIGINT NOT NULL, 
	CONSTRAINT pk_usage_rollup PRIMARY KEY (id), 
	CONSTRAINT fk_usage_rollup_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE
);

CREATE TABLE "threads" (
	id INTEGER NOT NULL, 
	agent VARCHAR(32) NOT NULL, 
	native_id VARCHAR(255) NOT NULL, 
	parent_id INTEGER, 
	parent_native_id VARCHAR(255), 
	parent_tool_use_id VARCHAR(255), 
	is_sidechain BOOLEAN NOT NULL, 
	agent_type VARCHAR(64), 
	title TEXT, 
	cwd TEXT, 
	git_branch VARCHAR(255), 
	version VARCHAR(64), 
	guidance JSON, 
	meta JSON, 
	source_file_id INTEGER, 
	started_at DATETIME, 
	ended_at DATETIME, 
	message_count INTEGER NOT NULL, 
	tool_call_count INTEGER NOT NULL, 
	file_edit_count INTEGER NOT NULL, 
	models TEXT, 
	rollup_dirty BOOLEAN DEFAULT 1 NOT NULL, 
	CONSTRAINT pk_threads PRIMARY KEY (id), 
	CONSTRAINT fk_threads_source_file_id_source_files FOREIGN KEY(source_file_id) REFERENCES source_files (id) ON DELETE SET NULL, 
	CONSTRAINT fk_threads_parent_id_threads FOREIGN KEY(parent_id) REFERENCES threads (id) ON DELETE SET NULL, 
	CONSTRAINT uq_threads_agent_native_id UNIQUE (agent, native_id)
);

CREATE TABLE guidance_files (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	path TEXT NOT NULL, 
	origin VARCHAR(16) NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	text TEXT NOT NULL, 
	read_at DATETIME NOT NULL, 
	message_native_id VARCHAR(255), 
	CONSTRAINT pk_guidance_files PRIMARY KEY (id), 
	CONSTRAINT fk_guidance_files_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT uq_guidance_files_thread_id_path_sha256 UNIQUE (thread_id, path, sha256)
);

CREATE TABLE price_state (
	id INTEGER NOT NULL, 
	"key" TEXT NOT NULL, 
	thresholds TEXT NOT NULL, 
	next_change VARCHAR(10), 
	CONSTRAINT pk_price_state PRIMARY KEY (id)
);

CREATE TABLE price_rates (
	model VARCHAR(128) NOT NULL, 
	provider VARCHAR(64) NOT NULL, 
	band INTEGER NOT NULL, 
	input TEXT, 
	output TEXT, 
	cache_read TEXT, 
	cache_write TEXT, 
	CONSTRAINT pk_price_rates PRIMARY KEY (model, provider, band)
);

CREATE TABLE usage_daily (
	day VARCHAR(10) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	band INTEGER NOT NULL, 
	calls INTEGER NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	cache_read_tokens BIGINT NOT NULL, 
	cache_write_tokens BIGINT NOT NULL, 
	CONSTRAINT pk_usage_daily PRIMARY KEY (day, model, band)
);

CREATE TABLE verdict_daily (
	day VARCHAR(10) NOT NULL, 
	observer VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	run_id INTEGER NOT NULL, 
	calls INTEGER NOT NULL, 
	invalid INTEGER NOT NULL, 
	errors INTEGER NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	cached_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	thinking_tokens BIGINT NOT NULL, 
	cost_usd DOUBLE NOT NULL, 
	credits DOUBLE NOT NULL, 
	priced INTEGER NOT NULL, 
	CONSTRAINT pk_verdict_daily PRIMARY KEY (day, observer, model, run_id)
);

CREATE TABLE batches (
	id INTEGER NOT NULL, 
	observer VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	label VARCHAR(64) NOT NULL, 
	provider_id VARCHAR(255), 
	state VARCHAR(16) NOT NULL, 
	provider_state VARCHAR(64), 
	requests INTEGER NOT NULL, 
	est_usd DOUBLE, 
	run_id INTEGER, 
	submitted_at DATETIME NOT NULL, 
	polled_at DATETIME, 
	collected_at DATETIME, 
	error TEXT, 
	CONSTRAINT pk_batches PRIMARY KEY (id), 
	CONSTRAINT fk_batches_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE SET NULL, 
	CONSTRAINT uq_batches_label UNIQUE (label)
);

CREATE TABLE batch_requests (
	id INTEGER NOT NULL, 
	batch_id INTEGER NOT NULL, 
	position INTEGER NOT NULL, 
	custom_id VARCHAR(64) NOT NULL, 
	checkpoint_id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	message_native_id VARCHAR(255) NOT NULL, 
	prompt_hash VARCHAR(64) NOT NULL, 
	input_hash VARCHAR(64) NOT NULL, 
	verdict_id INTEGER, 
	CONSTRAINT pk_batch_requests PRIMARY KEY (id), 
	CONSTRAINT fk_batch_requests_batch_id_batches FOREIGN KEY(batch_id) REFERENCES batches (id) ON DELETE CASCADE, 
	CONSTRAINT fk_batch_requests_checkpoint_id_checkpoints FOREIGN KEY(checkpoint_id) REFERENCES checkpoints (id) ON DELETE CASCADE, 
	CONSTRAINT uq_batch_requests_batch_id_custom_id UNIQUE (batch_id, custom_id)
);

CREATE TABLE "source_files" (
	id INTEGER NOT NULL, 
	path TEXT NOT NULL, 
	format VARCHAR(64), 
	size BIGINT NOT NULL, 
	mtime_ns BIGINT NOT NULL, 
	"offset" BIGINT NOT NULL, 
	lines INTEGER NOT NULL, 
	head_hash VARCHAR(64), 
	tail_hash VARCHAR(64), 
	parser_state JSON, 
	ingested_at DATETIME, 
	error_count INTEGER NOT NULL, 
	source VARCHAR(255) DEFAULT '' NOT NULL, 
	CONSTRAINT pk_source_files PRIMARY KEY (id), 
	CONSTRAINT uq_source_files_source_path UNIQUE (source, path)
);

CREATE TABLE "claims" (
	id INTEGER NOT NULL, 
	"key" VARCHAR(64) NOT NULL, 
	checkpoint_id INTEGER, 
	owner VARCHAR(255) NOT NULL, 
	claimed_at DATETIME NOT NULL, 
	expires_at DATETIME NOT NULL, 
	CONSTRAINT pk_claims PRIMARY KEY (id), 
	CONSTRAINT uq_claims_key UNIQUE ("key"), 
	CONSTRAINT fk_claims_checkpoint_id_checkpoints FOREIGN KEY(checkpoint_id) REFERENCES checkpoints (id) ON DELETE CASCADE
);

CREATE TABLE spend_reservations (
	id INTEGER NOT NULL, 
	owner VARCHAR(255) NOT NULL, 
	usd DOUBLE NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME NOT NULL, 
	CONSTRAINT pk_spend_reservations PRIMARY KEY (id)
);

CREATE TABLE forgotten_threads (
	id INTEGER NOT NULL, 
	agent VARCHAR(32) NOT NULL, 
	native_id VARCHAR(255) NOT NULL, 
	files JSON, 
	forgotten_at DATETIME NOT NULL, 
	CONSTRAINT pk_forgotten_threads PRIMARY KEY (id), 
	CONSTRAINT uq_forgotten_threads_agent_native_id UNIQUE (agent, native_id)
);

CREATE TABLE labels (
	id INTEGER NOT NULL, 
	thread_id INTEGER NOT NULL, 
	message_native_id VARCHAR(255) NOT NULL, 
	needs_correction BOOLEAN NOT NULL, 
	verdict_id INTEGER, 
	labelled_at DATETIME NOT NULL, 
	CONSTRAINT pk_labels PRIMARY KEY (id), 
	CONSTRAINT fk_labels_thread_id_threads FOREIGN KEY(thread_id) REFERENCES threads (id) ON DELETE CASCADE, 
	CONSTRAINT fk_labels_verdict_id_verdicts FOREIGN KEY(verdict_id) REFERENCES verdicts (id) ON DELETE SET NULL, 
	CONSTRAINT uq_labels_thread_id_message_native_id UNIQUE (thread_id, message_native_id)
);

CREATE VIRTUAL TABLE search_fts USING fts5(body, content='', columnsize=0);

CREATE INDEX ix_messages_source_file_id ON messages (source_file_id);

CREATE INDEX ix_messages_thread_id_seq ON messages (thread_id, seq);

CREATE INDEX ix_checkpoints_run_id ON checkpoints (run_id);

CREATE INDEX ix_verdicts_lookup ON verdicts (checkpoint_id, observer, model, prompt_hash, input_hash);

CREATE INDEX ix_verdicts_run_id ON verdicts (run_id);

CREATE INDEX ix_verdicts_thread_id ON verdicts (thread_id);

CREATE INDEX ix_token_usage_timestamp ON token_usage (timestamp);

CREATE INDEX ix_token_usage_source_file_id ON token_usage (source_file_id);

CREATE INDEX ix_tool_calls_source_file_id ON tool_calls (source_file_id);

CREATE INDEX ix_injections_thread_id ON injections (thread_id);

CREATE INDEX ix_injections_verdict_id ON injections (verdict_id);

CREATE INDEX ix_signals_checkpoint_id ON signals (checkpoint_id);

CREATE INDEX ix_signals_thread_id ON signals (thread_id);

CREATE INDEX ix_signals_name ON signals (name);

CREATE INDEX ix_events_at ON events (at);

CREATE INDEX ix_events_thread_id ON events (thread_id);

CREATE INDEX ix_events_type_at ON events (type, at);

CREATE INDEX ix_verdicts_critique_of ON verdicts (critique_of);

CREATE INDEX ix_usage_rollup_thread_id ON usage_rollup (thread_id);

CREATE INDEX ix_threads_parent_id ON threads (parent_id);

CREATE INDEX ix_threads_rollup_dirty ON threads (id) WHERE rollup_dirty;

CREATE INDEX ix_verdicts_unpriced ON verdicts (created_at) WHERE cost_usd IS NULL;

CREATE INDEX ix_batches_state ON batches (state);

CREATE INDEX ix_batch_requests_checkpoint_id ON batch_requests (checkpoint_id);

CREATE INDEX ix_verdicts_batch_id ON verdicts (batch_id);

CREATE INDEX ix_claims_checkpoint_id ON claims (checkpoint_id);

CREATE INDEX ix_labels_verdict_id ON labels (verdict_id);

CREATE INDEX ix_runs_running ON runs (id) WHERE status = 'running';

CREATE INDEX ix_tool_calls_thread_id_is_file_edit ON tool_calls (thread_id, is_file_edit);

CREATE INDEX ix_token_usage_thread_id_model ON token_usage (thread_id, model);

CREATE VIEW verdicts_view AS
SELECT
    v.id AS verdict_id,
    v.created_at,
    date(v.created_at) AS day,
    v.run_id,
    v.observer,
    v.model,
    v.prompt_version,
    v.status,
    v.needs_correction,
    v.message,
    v.problem,
    v.latency_ms,
    v.input_tokens,
    v.output_tokens,
    v.cached_tokens,
    v.thinking_tokens,
    v.cache_write_tokens,
    v.cost_usd,
    v.credits,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    t.title AS thread_title,
    c.id AS checkpoint_id,
    c.message_native_id AS checkpoint_message_id,
    c.kind AS checkpoint_kind,
    c.tool_calls AS checkpoint_tool_calls,
    c.file_edits AS checkpoint_file_edits,
    c.gate_reason
FROM verdicts v
JOIN threads t ON t.id = v.thread_id
JOIN checkpoints c ON c.id = v.checkpoint_id;

CREATE VIEW costs_view AS
SELECT
    'agent' AS side,
    u.timestamp AS at,
    date(u.timestamp) AS day,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    u.model,
    NULL AS observer,
    NULL AS run_id,
    NULL AS status,
    u.input_tokens,
    u.output_tokens,
    u.cache_read_tokens,
    u.cache_write_tokens,
    u.reasoning_tokens,
    NULL AS cost_usd,
    NULL AS credits
FROM token_usage u
JOIN threads t ON t.id = u.thread_id
WHERE NOT (t.parent_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM token_usage p WHERE p.thread_id = t.parent_id AND p.key = u.key
                       AND p.input_tokens = u.input_tokens AND p.output_tokens = u.output_tokens
                       AND p.cache_read_tokens = u.cache_read_tokens
                       AND p.cache_write_tokens = u.cache_write_tokens))
UNION ALL
SELECT
    'audit' AS side,
    v.created_at AS at,
    date(v.created_at) AS day,
    t.id AS thread_id,
    t.agent,
    t.native_id AS thread_native_id,
    t.cwd AS project,
    v.model,
    v.observer,
    v.run_id,
    v.status,
    max(v.input_tokens - v.cached_tokens, 0) AS input_tokens,
    v.output_tokens + v.thinking_tokens AS output_tokens,
    v.cached_tokens AS cache_read_tokens,
    v.cache_write_tokens,
    v.thinking_tokens AS reasoning_tokens,
    v.cost_usd,
    v.credits
FROM verdicts v
JOIN threads t ON t.id = v.thread_id;

CREATE TRIGGER verdict_daily_add AFTER INSERT ON verdicts BEGIN INSERT INTO verdict_daily (day, observer, model, run_id, calls, invalid, errors, input_tokens, cached_tokens, output_tokens, thinking_tokens, cost_usd, credits, priced) VALUES (substr(NEW.created_at, 1, 10), NEW.observer, NEW.model, coalesce(NEW.run_id, 0), 1, NEW.status = 'invalid', NEW.status = 'error', coalesce(NEW.input_tokens, 0), coalesce(NEW.cached_tokens, 0), coalesce(NEW.output_tokens, 0), coalesce(NEW.thinking_tokens, 0), coalesce(NEW.cost_usd, 0), coalesce(NEW.credits, 0), NEW.cost_usd IS NOT NULL) ON CONFLICT (day, observer, model, run_id) DO UPDATE SET calls = calls + excluded.calls, invalid = invalid + excluded.invalid, errors = errors + excluded.errors, input_tokens = input_tokens + excluded.input_tokens, cached_tokens = cached_tokens + excluded.cached_tokens, output_tokens = output_tokens + excluded.output_tokens, thinking_tokens = thinking_tokens + excluded.thinking_tokens, cost_usd = cost_usd + excluded.cost_usd, credits = credits + excluded.credits, priced = priced + excluded.priced; END;

CREATE TRIGGER verdict_daily_remove AFTER DELETE ON verdicts BEGIN UPDATE verdict_daily SET calls = calls - 1, invalid = invalid - (OLD.status = 'invalid'), errors = errors - (OLD.status = 'error'), input_tokens = input_tokens - coalesce(OLD.input_tokens, 0), cached_tokens = cached_tokens - coalesce(OLD.cached_tokens, 0), output_tokens = output_tokens - coalesce(OLD.output_tokens, 0), thinking_tokens = thinking_tokens - coalesce(OLD.thinking_tokens, 0), cost_usd = cost_usd - coalesce(OLD.cost_usd, 0), credits = credits - coalesce(OLD.credits, 0), priced = priced - (OLD.cost_usd IS NOT NULL) WHERE day = substr(OLD.created_at, 1, 10) AND observer = OLD.observer AND model = OLD.model AND run_id = coalesce(OLD.run_id, 0); DELETE FROM verdict_daily WHERE day = substr(OLD.created_at, 1, 10) AND observer = OLD.observer AND model = OLD.model AND run_id = coalesce(OLD.run_id, 0) AND calls <= 0; END;

CREATE TRIGGER verdict_daily_change AFTER UPDATE OF created_at, observer, model, run_id, status, input_tokens, cached_tokens, output_tokens, thinking_tokens, cost_usd, credits ON verdicts BEGIN UPDATE verdict_daily SET calls = calls - 1, invalid = invalid - (OLD.status = 'invalid'), errors = errors - (OLD.status = 'error'), input_tokens = input_tokens - coalesce(OLD.input_tokens, 0), cached_tokens = cached_tokens - coalesce(OLD.cached_tokens, 0), output_tokens = output_tokens - coalesce(OLD.output_tokens, 0), thinking_tokens = thinking_tokens - coalesce(OLD.thinking_tokens, 0), cost_usd = cost_usd - coalesce(OLD.cost_usd, 0), credits = credits - coalesce(OLD.credits, 0), priced = priced - (OLD.cost_usd IS NOT NULL) WHERE day = substr(OLD.created_at, 1, 10) AND observer = OLD.observer AND model = OLD.model AND run_id = coalesce(OLD.run_id, 0); DELETE FROM verdict_daily WHERE day = substr(OLD.created_at, 1, 10) AND observer = OLD.observer AND model = OLD.model AND run_id = coalesce(OLD.run_id, 0) AND calls <= 0; INSERT INTO verdict_daily (day, observer, model, run_id, calls, invalid, errors, input_tokens, cached_tokens, output_tokens, thinking_tokens, cost_usd, credits, priced) VALUES (substr(NEW.created_at, 1, 10), NEW.observer, NEW.model, coalesce(NEW.run_id, 0), 1, NEW.status = 'invalid', NEW.status = 'error', coalesce(NEW.input_tokens, 0), coalesce(NEW.cached_tokens, 0), coalesce(NEW.output_tokens, 0), coalesce(NEW.thinking_tokens, 0), coalesce(NEW.cost_usd, 0), coalesce(NEW.credits, 0), NEW.cost_usd IS NOT NULL) ON CONFLICT (day, observer, model, run_id) DO UPDATE SET calls = calls + excluded.calls, invalid = invalid + excluded.invalid, errors = errors + excluded.errors, input_tokens = input_tokens + excluded.input_tokens, cached_tokens = cached_tokens + excluded.cached_tokens, output_tokens = output_tokens + excluded.output_tokens, thinking_tokens = thinking_tokens + excluded.thinking_tokens, cost_usd = cost_usd + excluded.cost_usd, credits = credits + excluded.credits, priced = priced + excluded.priced; END;

CREATE TRIGGER usage_daily_add AFTER INSERT ON usage_rollup BEGIN INSERT INTO usage_daily (day, model, band, calls, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) VALUES (coalesce(NEW.day, ''), coalesce(NEW.model, ''), NEW.band, NEW.calls, NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens, NEW.cache_write_tokens) ON CONFLICT (day, model, band) DO UPDATE SET calls = calls + excluded.calls, input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens, cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens; END;

CREATE TRIGGER usage_daily_remove AFTER DELETE ON usage_rollup BEGIN UPDATE usage_daily SET calls = calls - OLD.calls, input_tokens = input_tokens - OLD.input_tokens, output_tokens = output_tokens - OLD.output_tokens, cache_read_tokens = cache_read_tokens - OLD.cache_read_tokens, cache_write_tokens = cache_write_tokens - OLD.cache_write_tokens WHERE day = coalesce(OLD.day, '') AND model = coalesce(OLD.model, '') AND band = OLD.band; DELETE FROM usage_daily WHERE day = coalesce(OLD.day, '') AND model = coalesce(OLD.model, '') AND band = OLD.band AND calls <= 0; END;

CREATE TRIGGER usage_daily_change AFTER UPDATE ON usage_rollup BEGIN UPDATE usage_daily SET calls = calls - OLD.calls, input_tokens = input_tokens - OLD.input_tokens, output_tokens = output_tokens - OLD.output_tokens, cache_read_tokens = cache_read_tokens - OLD.cache_read_tokens, cache_write_tokens = cache_write_tokens - OLD.cache_write_tokens WHERE day = coalesce(OLD.day, '') AND model = coalesce(OLD.model, '') AND band = OLD.band; DELETE FROM usage_daily WHERE day = coalesce(OLD.day, '') AND model = coalesce(OLD.model, '') AND band = OLD.band AND calls <= 0; INSERT INTO usage_daily (day, model, band, calls, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens) VALUES (coalesce(NEW.day, ''), coalesce(NEW.model, ''), NEW.band, NEW.calls, NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens, NEW.cache_write_tokens) ON CONFLICT (day, model, band) DO UPDATE SET calls = calls + excluded.calls, input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens, cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens; END;
