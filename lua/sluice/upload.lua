-- The upload endpoints' access step (multipart/form-data: audio transcriptions and
-- translations, image edits): the model and the form's small fields, read from the
-- body's head (and, when the fields come after the file, its tail), never the whole
-- body. nginx keeps the body in its buffer or, past the upload location's
-- client_body_buffer_size, in a temporary file (nginx/nginx.conf.tmpl); it is proxied
-- from there, and re-sent from there on a retry.
--
-- A body larger than any model here takes is a 413 before a byte of it is read (its
-- Content-Length); so is one larger than the model named in the query string
-- (`?model=`) takes. A body larger than some model takes (with Content-Length, over
-- HTTP/1.x) is read by Lua in pieces instead (peek): the head first, a 413 there
-- when the form names such a model, else the rest appended to nginx's request body
-- (its buffer, then its temporary file), so what follows is as for a body nginx
-- read. Others are checked once the head is read (sluice.media.check, with the rest
-- of the request's checks).
local multipart = require("sluice.multipart")
local media = require("sluice.media")

local ngx = ngx
local ngx_var = ngx.var
local ngx_req = ngx.req
local io_open = io.open
local tonumber = tonumber
local tostring = tostring
local str_sub = string.sub

local HEAD = 64 * 1024   -- bytes of the body read for the fields before the file
local CHUNK = 64 * 1024  -- bytes a time of a body read by peek()
local TAIL = 16 * 1024   -- and after it

local _M = {}

local function refuse(msg, param)
    return 400, "invalid_request_error", msg, { param = param }
end

-- The body's head and tail (strings; the tail nil when the head is all of it) and
-- its size, or nil.
local function pieces()
    ngx_req.read_body()
    local data = ngx_req.get_body_data()
    if data then
        return data, nil, #data
    end
    local path = ngx_req.get_body_file()
    if not path then
        return nil
    end
    local f = io_open(path, "rb")
    if not f then
        return nil
    end
    local head = f:read(HEAD) or ""
    local size = f:seek("end")
    local tail
    if size > HEAD then
        f:seek("set", size > HEAD + TAIL and size - TAIL or HEAD)
        tail = f:read(TAIL)
    end
    f:close()
    return head, tail, size
end

-- A body of `len` bytes, its head first: 413 (status, type, message) when the form
-- names a model of `snap` that takes less; else nil, the whole body now nginx's
-- request body. (499: the caller went away.)
local function peek(snap, endpoint, boundary, len)
    local sock = ngx_req.socket()
    if not sock then
        return nil   -- nginx reads it (pieces)
    end
    local head, err = sock:receive(len < HEAD and len or HEAD)
    if not head then
        return err == "closed" and 499 or 400, "invalid_request_error",
               "the upload was cut short: " .. tostring(err)
    end
    local parts = multipart.parse(head, boundary)
    local name = parts and multipart.value(head, parts, "model")
    local model = name and snap.models[name]
    local max = model and media.limit(model, endpoint)
    if max and len > max then
        return 413, "payload_too_large", "the request body (" .. len .. " bytes) is larger"
               .. " than model " .. name .. " takes (" .. max .. " bytes)"
    end
    ngx_req.init_body()   -- the location's client_body_buffer_size, then a file
    ngx_req.append_body(head)
    local left = len - #head
    while left > 0 do
        local chunk
        chunk, err = sock:receive(left < CHUNK and left or CHUNK)
        if not chunk then
            return err == "closed" and 499 or 400, "invalid_request_error",
                   "the upload was cut short: " .. tostring(err)
        end
        ngx_req.append_body(chunk)
        left = left - #chunk
    end
    ngx_req.finish_body()
    return nil
end

-- Access step of an upload endpoint. Returns status, type, message, extra on failure;
-- else nil, nil, nil, nil, the model name, the body's size and what was read of the
-- form: { fields = { name = value } (the plain fields found), file = the file part
-- (sluice.multipart's table: name, filename, content_type), boundary, seconds (a
-- WAV's, from its header; nil: not known) }.
function _M.read(endpoint, snap)
    local file_field = endpoint.file_field
    local boundary, why = multipart.boundary(ngx_var.http_content_type)
    if not boundary then
        return refuse(why .. ", with the upload in a part named " .. file_field, file_field)
    end
    local len = tonumber(ngx_var.http_content_length)
    local largest = media.largest(snap, endpoint)
    if len and len > largest then
        return 413, "payload_too_large", "the request body (" .. len .. " bytes) is larger"
               .. " than any model takes at " .. endpoint.path .. " (" .. largest .. " bytes)"
    end
    local query_model = ngx_var.arg_model
    if query_model then
        query_model = ngx.unescape_uri(query_model)
        local model = snap.models[query_model]
        local max = model and media.limit(model, endpoint)
        if max and len and len > max then
            return 413, "payload_too_large", "the request body (" .. len .. " bytes) is larger"
                   .. " than model " .. query_model .. " takes (" .. max .. " bytes)"
        end
    end

    if len and not query_model and len > media.smallest(snap, endpoint)
       and ngx_req.http_version() < 2 then
        local status, err_type, msg = peek(snap, endpoint, boundary, len)
        if status then
            return status, err_type, msg
        end
    end

    local head, tail, size = pieces()
    if not head then
        return refuse("the request has no body: the upload goes in a part named "
                      .. file_field, file_field)
    end
    local parts, perr = multipart.parse(head, boundary)
    if not parts then
        return refuse("malformed multipart body: " .. perr, file_field)
    end
    local fields = {}
    for i = 1, #parts do
        local p = parts[i]
        if not p.filename and p.to then
            fields[p.name] = str_sub(head, p.from, p.to)
        end
    end
    local file = multipart.find(parts, file_field) or multipart.find(parts, file_field .. "[]")
    local file_in = head   -- the piece the file part's offsets are in
    if tail then
        local tparts = multipart.parse(tail, boundary)
        for i = 1, tparts and #tparts or 0 do
            local p = tparts[i]
            if not p.filename and p.to and fields[p.name] == nil then
                fields[p.name] = str_sub(tail, p.from, p.to)
            elseif not file and (p.name == file_field or p.name == file_field .. "[]") then
                file, file_in = p, tail
            end
        end
    end
    if not file or not file.filename then
        return refuse("the form has no file part named " .. file_field, file_field)
    end
    local bad = media.file_type_error(endpoint, file.content_type, file.filename)
    if bad then
        return refuse(bad, file_field)
    end
    local name = query_model or fields.model
    if not name or name == "" then
        return refuse('the form needs a "model" field (or ?model= in the query)', "model")
    end
    -- a WAV's seconds from its header, when its start is in the head (usage)
    local seconds = media.wav_seconds(str_sub(file_in, file.from, file.to or #file_in),
                                      not file.to)
    return nil, nil, nil, nil, name, size,
           { fields = fields, file = file, boundary = boundary, seconds = seconds or nil }
end

return _M
