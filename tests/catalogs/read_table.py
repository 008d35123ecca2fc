"""Loads a table through an Iceberg catalog with pyiceberg, and prints what it sees as JSON.

    python read_table.py '<catalog properties as JSON>' namespace.table

The properties are pyiceberg's (`type` = `rest` or `sql`, `uri`, `credential`, `warehouse`,
`s3.*`, ...), and `catalog-name`: the name pyiceberg gives the catalog, which a SQL catalog
reads as the `catalog_name` of its rows. Prints the metadata location, the format version, the current schema's fields,
the table's properties, the number of snapshots, the number of rows it reads, and the namespaces the catalog lists.
"""

import json
import sys

from pyiceberg.catalog import load_catalog


def main() -> None:
    properties = json.loads(sys.argv[1])
    name = properties.pop("catalog-name", "tributary-test")
    catalog = load_catalog(name, **properties)
    table = catalog.load_table(sys.argv[2])
    schema = table.schema()
    print(
        json.dumps(
            {
                "metadata_location": table.metadata_location,
                "format_version": table.metadata.format_version,
                "table_uuid": str(table.metadata.table_uuid),
                "schema_id": schema.schema_id,
                "fields": [
                    {"id": field.field_id, "name": field.name, "type": str(field.field_type), "required": field.required}
                    for field in schema.fields
                ],
                "properties": table.properties,
                "snapshots": len(table.metadata.snapshots),
                "rows": table.scan().to_arrow().num_rows,
                "namespaces": [".".join(ns) for ns in catalog.list_namespaces()],
            }
        )
    )


if __name__ == "__main__":
    main()
