"""Python client for the Sluice AI inference gateway.

    import sluice_client
    sluice_client.Model("chat-demo").generate("hi")     # $SLUICE_BASE_URL, $SLUICE_API_KEY

    from sluice_client import Sluice
    client = Sluice("http://127.0.0.1:8000", "sk-...")
    client.model("chat-demo").generate(prompt="hi", stream=True, callback=print)
    client.model("chat-demo").messages([{"role": "user", "content": "hi"}], max_tokens=64)
    client.model("chat-demo").responses("hi", tools=[...])     # tool_calls(answer)
    job = client.submit("chat-demo", [{"role": "user", "content": "hi"}])   # async
    client.wait(job)["result"]["body"]
"""
from sluice_client.client import Model, Sluice
from sluice_client.errors import (APIConnectionError, APIStatusError, APITimeoutError,
                                  AuthenticationError, BackendError, BadRequestError,
                                  ContentPolicyError, GatewayTimeoutError,
                                  InternalServerError, NotFoundError, PayloadTooLargeError,
                                  PermissionDeniedError, RateLimitError,
                                  ServiceUnavailableError, SluiceError)
from sluice_client.streams import Stream
from sluice_client.tools import ToolCall, text_of, tool_calls
from sluice_client.webhooks import verify_signature

__version__ = "0.1.0"

__all__ = ["Sluice", "Model", "Stream", "ToolCall", "tool_calls", "text_of",
           "verify_signature", "SluiceError", "APIConnectionError", "APITimeoutError",
           "APIStatusError", "BadRequestError", "AuthenticationError",
           "PermissionDeniedError", "NotFoundError", "PayloadTooLargeError",
           "RateLimitError", "ContentPolicyError", "InternalServerError", "BackendError",
           "ServiceUnavailableError", "GatewayTimeoutError"]
