-- The compiled models a name in a request stands for: the model itself, or every
-- version of a route (its conditional and its split ones). Pure: no ngx.*.
local _M = {}

-- Does pred(m, arg) hold for the model of any entry of `list` (a route's versions)?
local function any_version(list, models, pred, arg)
    for i = 1, #list do
        if pred(models[list[i].model], arg) then
            return true
        end
    end
    return false
end

-- Does pred(m, arg) hold for the model `name`, or for any version of route `name`?
-- `m` is nil for a name, or a version, that names no model: pred decides. (No table
-- per call: body.needs_doc asks on the request path.)
function _M.any(snap, name, pred, arg)
    local route = snap.routes[name]
    if not route then
        return pred(snap.models[name], arg) and true or false
    end
    local models = snap.models
    return any_version(route.cond, models, pred, arg)
           or any_version(route.split, models, pred, arg)
end

return _M
