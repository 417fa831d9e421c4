"""How learning happens: data types, registries, configs, collection, algorithms, trainers."""
