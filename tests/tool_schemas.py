"""Tools for the end-to-end tool-calling test: 22 function schemas of the kinds agents use."""

from __future__ import annotations

S = {"type": "string", "maxLength": 40}


def tool(name: str, description: str, properties: dict, required: list[str] | None = None) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required if required is not None else list(properties),
        "additionalProperties": False}}}


TOOLS = [
    tool("get_weather", "Current weather in a city", {"city": S}),
    tool("get_forecast", "Weather forecast", {"city": S, "days": {"type": "integer", "minimum": 1, "maximum": 7}}),
    tool("search_web", "Search the web", {"query": S, "max_results": {"type": "integer", "minimum": 1, "maximum": 10}}),
    tool("send_email", "Send an email", {"to": {"type": "string", "format": "email"}, "subject": S, "body": S}),
    tool("create_event", "Create a calendar event", {"title": S, "date": {"type": "string", "format": "date"},
                                                     "start": {"type": "string", "format": "time"}}),
    tool("set_timer", "Set a timer", {"minutes": {"type": "integer", "minimum": 1, "maximum": 120}}),
    tool("convert_currency", "Convert money", {"amount": {"type": "number", "minimum": 0, "maximum": 1000000},
                                               "from": {"enum": ["USD", "EUR", "GBP", "JPY"]},
                                               "to": {"enum": ["USD", "EUR", "GBP", "JPY"]}}),
    tool("translate", "Translate text", {"text": S, "target": {"enum": ["fr", "de", "es", "it"]}}),
    tool("add_todo", "Add a to-do item", {"item": S, "priority": {"enum": ["low", "medium", "high"]}}, ["item"]),
    tool("read_file", "Read a file", {"path": {"type": "string", "pattern": "^/[a-z0-9_/.-]{1,40}$"}}),
    tool("run_sql", "Run a read-only SQL query", {"query": S}),
    tool("get_stock_price", "Stock price", {"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"}}),
    tool("book_table", "Book a restaurant table", {"restaurant": S, "people": {"type": "integer", "minimum": 1,
                                                                                 "maximum": 12},
                                                   "date": {"type": "string", "format": "date"}}),
    tool("play_music", "Play a song", {"song": S, "artist": S}, ["song"]),
    tool("set_thermostat", "Set the temperature", {"celsius": {"type": "number", "minimum": 10, "maximum": 30}}),
    tool("lookup_contact", "Find a contact", {"name": S}),
    tool("open_url", "Open a web page", {"url": {"type": "string", "format": "uri", "maxLength": 60}}),
    tool("calculate", "Evaluate arithmetic", {"expression": {"type": "string", "pattern": "^[0-9+*/(). -]{1,30}$"}}),
    tool("list_files", "List a folder", {"folder": S, "recursive": {"type": "boolean"}}),
    tool("create_issue", "File a bug", {"title": S, "labels": {"type": "array", "items": {"enum": ["bug", "ui", "api"]},
                                                                "maxItems": 3}}),
    tool("geocode", "Coordinates of a place", {"place": S}),
    tool("ping_host", "Ping a host", {"host": {"type": "string", "format": "ipv4"}, "count": {
        "type": "integer", "minimum": 1, "maximum": 5}}),
]

ASKS = {
    "get_weather": "What's the weather in Paris?", "get_forecast": "Forecast for Rome for 3 days?",
    "search_web": "Search the web for llama recipes.", "send_email": "Email bob@example.com saying hi.",
    "create_event": "Put a dentist visit on 2025-05-02 at 10:00.", "set_timer": "Set a timer for 5 minutes.",
    "convert_currency": "Convert 20 USD to EUR.", "translate": "Translate 'hello' to French.",
    "add_todo": "Add 'buy milk' to my to-do list.", "read_file": "Show me /etc/hosts.",
    "run_sql": "How many users are there? Use SQL.", "get_stock_price": "What's Apple's stock price?",
    "book_table": "Book a table for 2 at Luigi's tomorrow.", "play_music": "Play Yesterday by the Beatles.",
    "set_thermostat": "Set the heating to 21 degrees.", "lookup_contact": "Find Alice's number.",
    "open_url": "Open example.com.", "calculate": "What is 12*7?", "list_files": "List my documents folder.",
    "create_issue": "File a bug: the login button is broken.", "geocode": "Where is Berlin?",
    "ping_host": "Ping 8.8.8.8 twice.",
}
