-- 0004_responses: stored Responses-API responses (internal/serve), which
-- previous_response_id continues and GET/DELETE /v1/responses/{id} reach.
-- response is the response object as answered (JSON), history the
-- conversation it ends (JSON chat messages). Rows are per user; the
-- server prunes each user's to the newest N and all to a maximum age.
CREATE TABLE responses (
    id         TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    response   TEXT NOT NULL,
    history    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX responses_user ON responses(user_id, created_at);
CREATE INDEX responses_created ON responses(created_at);
