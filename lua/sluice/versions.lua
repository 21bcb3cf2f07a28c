-- The compiled models a name in a request stands for: the model itself, or every
-- version of a route (its conditional and its split ones). Pure: no ngx.*.
local _M = {}

-- Does pred(m, arg) hold for the model `name`, or for any version of route `name`?
-- `m` is nil for a name, or a version, that names no model: pred decides.
function _M.any(snap, name, pred, arg)
    local route = snap.routes[name]
    if not route then
        return pred(snap.models[name], arg) and true or false
    end
    local models = snap.models
    for _, list in ipairs({ route.cond, route.split }) do
        for i = 1, #list do
            if pred(models[list[i].model], arg) then
                return true
            end
        end
    end
    return false
end

return _M
