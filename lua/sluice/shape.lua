-- How a hosted vendor wants its requests (control_plane/services/presets.py fills it
-- from a preset; docs/presets.md): the header its key goes in when that is not
-- Authorization ("api-key", "x-goog-api-key", "x-api-key"), other headers sent as they
-- are ("anthropic-version"), the gateway's backend paths mapped to the vendor's
-- (Azure: "/v1/chat/completions" -> "/chat/completions" under the deployment) and a
-- query string sent with every request ("api-version=..."). An adapter's path may
-- carry a query of its own (Gemini's ":streamGenerateContent?alt=sse"); the two are
-- joined, and replace the caller's query string (an OpenAI-style API has none).
--
-- attach() runs once per snapshot per backend; apply() once per forward, and costs
-- one string search for a backend without a shape.
local cjson = require("cjson.safe")

local ngx = ngx
local set_header = ngx.req.set_header
local clear_header = ngx.req.clear_header
local set_uri_args = ngx.req.set_uri_args
local type = type
local pairs = pairs
local concat = table.concat
local sort = table.sort
local str_find = string.find
local str_sub = string.sub
local str_lower = string.lower
local re_find = ngx.re.find

local json_null = cjson.null

local TOKEN = [=[^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$]=]
local LINE = [=[^[^\x00-\x1f\x7f]+$]=]
local QUERY = [=[^[A-Za-z0-9._~%=&+:,-]{1,1024}$]=]
local PATH = [=[^/[^\s?#]*$]=]

local _M = {}

-- Header names some backend of this worker's snapshots was sent: a later pass of a
-- request that was sent some clears them before it applies its own (names only).
local sent_names = {}

local function str(v)
    return type(v) == "string" and v ~= "" and v or nil
end

local function matches(v, re)
    return type(v) == "string" and re_find(v, re, "jo") ~= nil
end

-- A backend entry's shape fields (absent or null: none): nil, or what is wrong
-- with them, after `where`.
function _M.validate(b, where)
    local name = b.auth_header_name
    if name ~= nil and name ~= json_null and not matches(name, TOKEN) then
        return where .. ".auth_header_name: must be an HTTP header name"
    end
    local headers = b.headers
    if headers ~= nil and headers ~= json_null then
        if type(headers) ~= "table" then
            return where .. ".headers: must be an object"
        end
        for k, v in pairs(headers) do
            if not matches(k, TOKEN) or not matches(v, LINE) then
                return where .. ".headers: must map header names to single-line values"
            end
        end
    end
    local paths = b.paths
    if paths ~= nil and paths ~= json_null then
        if type(paths) ~= "table" then
            return where .. ".paths: must be an object"
        end
        for k, v in pairs(paths) do
            if not matches(k, PATH) or not matches(v, PATH) then
                return where .. ".paths: must map paths (/...) to paths"
            end
        end
    end
    local query = b.query
    if query ~= nil and query ~= json_null and not matches(query, QUERY) then
        return where .. ".query: must be a query string (no ? or #)"
    end
    return nil
end

-- Config step: the shape of backend entry `b` onto `backend`, its compiled form
-- (backend.shape, nil for none; backend.shape_id, for sluice.balancer's retries). A
-- key whose header is not Authorization leaves backend.auth_header: in X-API-Key it
-- becomes the "x-api-key:" mark nginx.conf.tmpl maps to that header, in any other
-- header one of the shape's.
function _M.attach(backend, b)
    local cred = str(b.auth_header)
    local name = str(b.auth_header_name)
    local lname = name and str_lower(name)
    local elsewhere = cred and lname and lname ~= "authorization"
    local headers = type(b.headers) == "table" and b.headers ~= json_null and b.headers or nil
    local paths = type(b.paths) == "table" and b.paths ~= json_null and b.paths or nil
    local query = str(b.query)
    if not elsewhere and not headers and not paths and not query then
        return
    end
    local shape = { names = {}, values = {}, n = 0, paths = paths, query = query }
    local id = {}
    local function add(hname, value)
        local n = shape.n + 1
        shape.n = n
        shape.names[n], shape.values[n] = hname, value
        id[#id + 1] = hname .. ":" .. value
    end
    if lname == "x-api-key" and cred then
        backend.auth_header = "x-api-key:" .. cred
    elseif elsewhere then
        backend.auth_header = ""
        add(name, cred)
    end
    for hname, value in pairs(headers or {}) do
        if type(hname) == "string" and type(value) == "string" then
            add(hname, value)
        end
    end
    for from, to in pairs(paths or {}) do
        id[#id + 1] = from .. ">" .. (type(to) == "string" and to or "")
    end
    id[#id + 1] = "?" .. (query or "")
    sort(id)
    shape.id = concat(id, "\n")
    backend.shape, backend.shape_id = shape, shape.id
end

-- Forward step, for `backend` and the backend path `path` an adapter chose: sets the
-- shape's headers and the query string on the request. A pass after one that set
-- them (the fallback's) first clears them: another vendor never gets them. Returns
-- the path to use. Writes ctx.backend.shape.
function _M.apply(ctx, backend, path)
    local shape = backend.shape
    local qpos = str_find(path, "?", 1, true)
    local query
    if qpos then
        query = str_sub(path, qpos + 1)
        path = str_sub(path, 1, qpos - 1)
    end
    local earlier = ctx.backend.shape
    if earlier then
        for hname in pairs(sent_names) do
            clear_header(hname)
        end
    end
    if shape then
        for i = 1, shape.n do
            local hname = shape.names[i]
            sent_names[hname] = true
            set_header(hname, shape.values[i])
        end
        if shape.paths then
            local mapped = shape.paths[path]
            if type(mapped) == "string" then
                path = mapped
            end
        end
        if shape.query then
            query = query and shape.query .. "&" .. query or shape.query
        end
    end
    if query then
        set_uri_args(query)
    elseif earlier then
        set_uri_args("")   -- the earlier vendor's query (the caller's was gone with it)
    end
    if shape or query or earlier then
        ctx.backend.shape = (shape ~= nil and shape.n > 0) or query ~= nil
    end
    return path
end

return _M
