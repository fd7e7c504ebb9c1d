"""Adapters to agent frameworks; each module needs its framework's extra installed.

* ``eidetica.integrations.langgraph.EideticaStore`` - a LangGraph ``BaseStore`` (``eidetica[langgraph]``).
* ``eidetica.integrations.openai_agents.EideticaSession`` - an OpenAI Agents SDK ``Session``
  (``eidetica[openai-agents]``).
"""
